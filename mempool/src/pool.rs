//! Fixed-size buffer pools (filled in below).

/// Handle of one pool buffer: which region, which size class, which buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BufRef {
    /// Region id (index into the pool's region table).
    pub region: u16,
    /// Size class index.
    pub class: u8,
    /// Buffer index within the class.
    pub index: u32,
}
