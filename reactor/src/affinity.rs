//! CPU affinity of threads: the one place that builds a `cpu_set_t` and
//! calls `sched_getaffinity` / `sched_setaffinity` (the reactor's watcher
//! moves core threads with it; the application confines its helpers with
//! it). Any thread.

/// `cpus` as a `cpu_set_t` (CPUs at or above `CPU_SETSIZE` left out).
pub fn cpu_set(cpus: &[usize]) -> libc::cpu_set_t {
    // SAFETY: cpu_set_t is plain data; all zeros is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
        // SAFETY: `c` is below CPU_SETSIZE, within the set.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    set
}

/// The calling thread's allowed CPUs.
pub fn thread_cpus() -> Option<Vec<usize>> {
    thread_cpus_of(0)
}

/// The allowed CPUs of thread `tid` of this process (0: the calling
/// thread); `None` when it cannot be read (the thread is gone).
pub fn thread_cpus_of(tid: libc::pid_t) -> Option<Vec<usize>> {
    // SAFETY: cpu_set_t is plain data; all zeros is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid cpu_set_t of the size passed; `tid` is 0 or
    // a thread id (a stale one fails with ESRCH).
    let r = unsafe { libc::sched_getaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if r != 0 {
        return None;
    }
    // SAFETY: CPU_ISSET reads the set within its size (CPU_SETSIZE).
    Some(
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
            .collect(),
    )
}

/// Restricts thread `tid` of this process (0: the calling thread) to
/// `cpus`.
pub fn set_thread_cpus(tid: libc::pid_t, cpus: &[usize]) -> std::io::Result<()> {
    let set = cpu_set(cpus);
    // SAFETY: `set` is a valid cpu_set_t of the size passed; `tid` is 0 or
    // a thread of this process (or gone: then the call fails with ESRCH).
    let r = unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
