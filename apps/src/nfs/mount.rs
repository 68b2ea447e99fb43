//! MOUNT version 3 (RFC 1813 section 5.2): MNT, DUMP, UMNT, UMNTALL, EXPORT.
//!
//! MNT answers for a configured export path or a directory below one
//! (trailing slashes ignored; `/export/sub` mounts directory `sub` of export
//! `/export`, as the Linux server allows; `..` components are refused with
//! MNT3ERR_ACCES, a missing one is MNT3ERR_NOENT, a non-directory
//! MNT3ERR_NOTDIR), refuses clients outside the export's networks
//! with MNT3ERR_ACCES and AUTH_NONE on exports without `allow_auth_none` with
//! AUTH_ERROR / AUTH_TOOWEAK, and lists AUTH_SYS (and AUTH_NONE where allowed)
//! as the flavors. The MOUNT list is informational and bounded
//! ([`super::MAX_MOUNT_ENTRIES`]); DUMP and EXPORT list what fits the reply.
//! Control path; any core.

use dataplane::service::ReplyBuilder;
use proto::nfs3::*;
use proto::rpc::{AuthStat, AUTH_NONE, AUTH_SYS};
use proto::xdr::{roundup, Reader, Writer};

use super::auth::Cred;
use super::export::normalize_path;
use super::xdr::dirpath;
use super::{Call, Fail, MountEntry, NfsShared, MAX_MOUNT_ENTRIES};
use crate::backend::{FsError, FH_MAX_BYTES};

/// The name the MOUNT list records for the caller: its address, else its
/// AUTH_SYS machine name, else `unknown`.
fn host_of(c: &Call<'_>) -> String {
    if let Some(a) = c.peer {
        return a.to_string();
    }
    match c.cred {
        Cred::Sys(s) if !s.machinename.is_empty() => String::from_utf8_lossy(s.machinename).into_owned(),
        _ => "unknown".to_string(),
    }
}

/// Run MOUNT procedure `c.proc_` (1..=5), writing its results at `base`.
pub(crate) fn call(sh: &NfsShared, c: &Call<'_>, reply: &mut ReplyBuilder<'_>, base: usize) -> Result<usize, Fail> {
    let head = reply.head_mut();
    let at = base.min(head.len());
    let mut w = Writer::new(&mut head[at..]);
    match c.proc_ {
        MOUNTPROC3_MNT => mnt(sh, c, &mut w)?,
        MOUNTPROC3_DUMP => dump(sh, &mut w)?,
        MOUNTPROC3_UMNT => {
            let path = dirpath(&mut Reader::new(c.args))?;
            let path = String::from_utf8_lossy(normalize_path(path)).into_owned();
            let host = host_of(c);
            sh.lock_mounts().retain(|m| !(m.host == host && m.path == path));
        }
        MOUNTPROC3_UMNTALL => {
            let host = host_of(c);
            sh.lock_mounts().retain(|m| m.host != host);
        }
        MOUNTPROC3_EXPORT => export(sh, &mut w)?,
        _ => return Err(Fail::System),
    }
    Ok(w.len())
}

fn mnt(sh: &NfsShared, c: &Call<'_>, w: &mut Writer<'_>) -> Result<(), Fail> {
    let path = normalize_path(dirpath(&mut Reader::new(c.args))?);
    let Some((ex, rest)) = super::export::find(&sh.exports, path) else {
        w.put_u32(MNT3ERR_NOENT)?;
        return Ok(());
    };
    if !ex.allows_peer(c.peer) {
        w.put_u32(MNT3ERR_ACCES)?;
        return Ok(());
    }
    if matches!(c.cred, Cred::None) && !ex.allow_auth_none {
        return Err(Fail::Auth(AuthStat::TooWeak));
    }
    let at = match super::export::walk(&*sh.backends[ex.backend].1, ex.root, rest) {
        Ok(fh) => fh,
        Err(e) => {
            w.put_u32(match e {
                FsError::NoEnt | FsError::Stale => MNT3ERR_NOENT,
                FsError::NotDir => MNT3ERR_NOTDIR,
                FsError::Acces | FsError::Perm => MNT3ERR_ACCES,
                FsError::NameTooLong => MNT3ERR_NAMETOOLONG,
                FsError::Inval | FsError::BadHandle => MNT3ERR_INVAL,
                _ => MNT3ERR_IO,
            })?;
            return Ok(());
        }
    };
    let mut fh = [0u8; FH_MAX_BYTES];
    let Some(n) = ex.encode_fh(&at, &mut fh) else {
        w.put_u32(MNT3ERR_SERVERFAULT)?;
        return Ok(());
    };
    w.put_u32(MNT3_OK)?;
    w.put_opaque_var(&fh[..n])?;
    if ex.allow_auth_none {
        w.put_u32(2)?;
        w.put_u32(AUTH_SYS)?;
        w.put_u32(AUTH_NONE)?;
    } else {
        w.put_u32(1)?;
        w.put_u32(AUTH_SYS)?;
    }
    let entry = MountEntry {
        host: host_of(c),
        path: String::from_utf8_lossy(path).into_owned(),
    };
    let mut list = sh.lock_mounts();
    if !list.contains(&entry) {
        if list.len() >= MAX_MOUNT_ENTRIES {
            list.pop_front();
        }
        list.push_back(entry);
    }
    Ok(())
}

/// XDR size of a `string<>`.
fn string_bytes(s: &str) -> usize {
    4 + roundup(s.len())
}

fn put_str(w: &mut Writer<'_>, s: &str, max: usize) -> Result<(), Fail> {
    let b = s.as_bytes();
    w.put_opaque_var(&b[..b.len().min(max)])?;
    Ok(())
}

/// DUMP: the `mountlist`, as many entries as fit.
fn dump(sh: &NfsShared, w: &mut Writer<'_>) -> Result<(), Fail> {
    let list = sh.lock_mounts();
    for m in list.iter() {
        let host = &m.host[..m.host.len().min(MNTNAMLEN as usize)];
        let need = 4 + string_bytes(host) + string_bytes(&m.path) + 4;
        if w.remaining() < need {
            break;
        }
        w.put_bool(true)?;
        put_str(w, host, MNTNAMLEN as usize)?;
        put_str(w, &m.path, MNTPATHLEN as usize)?;
    }
    w.put_bool(false)?;
    Ok(())
}

/// EXPORT: the `exports` list with each export's client networks as its
/// groups, as many exports as fit.
fn export(sh: &NfsShared, w: &mut Writer<'_>) -> Result<(), Fail> {
    for e in &sh.exports {
        let groups: usize = e.clients.iter().map(|g| 4 + string_bytes(g)).sum();
        let need = 4 + string_bytes(&e.path) + groups + 4 + 4;
        if w.remaining() < need {
            break;
        }
        w.put_bool(true)?;
        put_str(w, &e.path, MNTPATHLEN as usize)?;
        for g in &e.clients {
            w.put_bool(true)?;
            put_str(w, g, MNTNAMLEN as usize)?;
        }
        w.put_bool(false)?;
    }
    w.put_bool(false)?;
    Ok(())
}
