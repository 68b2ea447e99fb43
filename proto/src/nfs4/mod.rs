//! NFS version 4 minor versions 1 and 2 (RFC 8881, RFC 7862): program
//! constants, status codes, attribute numbers, bounds, and a zero-copy
//! decoder of COMPOUND4args ([`args`]) that yields one operation at a time
//! as a borrowed view.
//!
//! Numbers are from the XDR of RFC 8881 section 23 (operations, `nfsstat4`,
//! attributes) and RFC 7862 section 15; the NFSv4.0 subset agrees with
//! `libnfs-raw-nfs4.h`.
//!
//! Every count a peer sends is bounded here before anything is walked
//! (operations per COMPOUND, bitmap words, names, opaques, attribute
//! values); a violation is a status ([`NFS4ERR_BADXDR`],
//! [`NFS4ERR_RESOURCE`], [`NFS4ERR_NAMETOOLONG`], ...) the service answers
//! with, never a panic. Nothing allocates.

pub mod args;
pub mod cb;
pub mod fattr;
pub mod ulb;

#[cfg(test)]
mod tests;

/// NFS protocol version 4 (the program is [`crate::nfs3::NFS_PROGRAM`]).
pub const NFS_V4: u32 = 4;
/// NULL procedure.
pub const NFSPROC4_NULL: u32 = 0;
/// COMPOUND procedure.
pub const NFSPROC4_COMPOUND: u32 = 1;

// ---------------------------------------------------------------------------
// Bounds (ours; RFC 8881 leaves most of these to the server)
// ---------------------------------------------------------------------------

/// Operations per COMPOUND we decode and grant as `ca_maxoperations`
/// (RFC 8881 s18.36): the Linux server's limit.
pub const MAX_OPS: u32 = 50;
/// COMPOUND `tag` bound (RFC 8881 leaves `utf8str_cs` unbounded).
pub const MAX_TAG_BYTES: u32 = 256;
/// Attribute bitmap words decoded: words 0..=2 cover every attribute of
/// RFC 8881 and RFC 7862; words past [`BITMAP_WORDS`] must be zero.
pub const MAX_BITMAP_WORDS: u32 = 8;
/// Bitmap words kept.
pub const BITMAP_WORDS: usize = 3;
/// `NFS4_FHSIZE` (RFC 8881 s3.2).
pub const NFS4_FHSIZE: u32 = 128;
/// `NFS4_OPAQUE_LIMIT` (RFC 8881 s3.2): owners, client ids, server scope.
pub const NFS4_OPAQUE_LIMIT: u32 = 1024;
/// Component names: NAME_MAX (longer ones are NFS4ERR_NAMETOOLONG).
pub const MAX_NAME_BYTES: u32 = 255;
/// Symbolic link text (PATH_MAX).
pub const MAX_LINK_BYTES: u32 = 4096;
/// Bytes of `attr_vals` in one `fattr4` of a Call (SETATTR, CREATE, OPEN,
/// VERIFY): the settable attributes take far less.
pub const MAX_FATTR_BYTES: u32 = 4096;
/// Largest READ or WRITE `data` decoded inline or taken from a chunk.
pub const MAX_DATA_BYTES: u32 = 1 << 20;
/// Elements of a TEST_STATEID array.
pub const MAX_TEST_STATEIDS: u32 = 64;
/// Entries of `csa_sec_parms` (CREATE_SESSION) walked.
pub const MAX_CB_SEC_PARMS: u32 = 16;
/// `sec_oid4` entries of an SSV state protection walked.
pub const MAX_SEC_OIDS: u32 = 16;
/// `netloc4` entries of COPY's `ca_source_server` walked (inter-server
/// copy is NFS4ERR_NOTSUPP; the list is only stepped over).
pub const MAX_NETLOCS: u32 = 16;

/// `NFS4_VERIFIER_SIZE`.
pub const NFS4_VERIFIER_SIZE: usize = 8;
/// `NFS4_SESSIONID_SIZE`.
pub const NFS4_SESSIONID_SIZE: usize = 16;
/// `stateid4.other` bytes.
pub const NFS4_OTHER_SIZE: usize = 12;

// ---------------------------------------------------------------------------
// Operations (RFC 8881 s16.2.1, RFC 7862 s15)
// ---------------------------------------------------------------------------

pub const OP_ACCESS: u32 = 3;
pub const OP_CLOSE: u32 = 4;
pub const OP_COMMIT: u32 = 5;
pub const OP_CREATE: u32 = 6;
pub const OP_DELEGPURGE: u32 = 7;
pub const OP_DELEGRETURN: u32 = 8;
pub const OP_GETATTR: u32 = 9;
pub const OP_GETFH: u32 = 10;
pub const OP_LINK: u32 = 11;
pub const OP_LOCK: u32 = 12;
pub const OP_LOCKT: u32 = 13;
pub const OP_LOCKU: u32 = 14;
pub const OP_LOOKUP: u32 = 15;
pub const OP_LOOKUPP: u32 = 16;
pub const OP_NVERIFY: u32 = 17;
pub const OP_OPEN: u32 = 18;
pub const OP_OPENATTR: u32 = 19;
pub const OP_OPEN_CONFIRM: u32 = 20;
pub const OP_OPEN_DOWNGRADE: u32 = 21;
pub const OP_PUTFH: u32 = 22;
pub const OP_PUTPUBFH: u32 = 23;
pub const OP_PUTROOTFH: u32 = 24;
pub const OP_READ: u32 = 25;
pub const OP_READDIR: u32 = 26;
pub const OP_READLINK: u32 = 27;
pub const OP_REMOVE: u32 = 28;
pub const OP_RENAME: u32 = 29;
pub const OP_RENEW: u32 = 30;
pub const OP_RESTOREFH: u32 = 31;
pub const OP_SAVEFH: u32 = 32;
pub const OP_SECINFO: u32 = 33;
pub const OP_SETATTR: u32 = 34;
pub const OP_SETCLIENTID: u32 = 35;
pub const OP_SETCLIENTID_CONFIRM: u32 = 36;
pub const OP_VERIFY: u32 = 37;
pub const OP_WRITE: u32 = 38;
pub const OP_RELEASE_LOCKOWNER: u32 = 39;
pub const OP_BACKCHANNEL_CTL: u32 = 40;
pub const OP_BIND_CONN_TO_SESSION: u32 = 41;
pub const OP_EXCHANGE_ID: u32 = 42;
pub const OP_CREATE_SESSION: u32 = 43;
pub const OP_DESTROY_SESSION: u32 = 44;
pub const OP_FREE_STATEID: u32 = 45;
pub const OP_GET_DIR_DELEGATION: u32 = 46;
pub const OP_GETDEVICEINFO: u32 = 47;
pub const OP_GETDEVICELIST: u32 = 48;
pub const OP_LAYOUTCOMMIT: u32 = 49;
pub const OP_LAYOUTGET: u32 = 50;
pub const OP_LAYOUTRETURN: u32 = 51;
pub const OP_SECINFO_NO_NAME: u32 = 52;
pub const OP_SEQUENCE: u32 = 53;
pub const OP_SET_SSV: u32 = 54;
pub const OP_TEST_STATEID: u32 = 55;
pub const OP_WANT_DELEGATION: u32 = 56;
pub const OP_DESTROY_CLIENTID: u32 = 57;
pub const OP_RECLAIM_COMPLETE: u32 = 58;
// NFSv4.2 (RFC 7862 s15.1; 72..=75 are RFC 8276's extended attributes).
pub const OP_ALLOCATE: u32 = 59;
pub const OP_COPY: u32 = 60;
pub const OP_COPY_NOTIFY: u32 = 61;
pub const OP_DEALLOCATE: u32 = 62;
pub const OP_IO_ADVISE: u32 = 63;
pub const OP_LAYOUTERROR: u32 = 64;
pub const OP_LAYOUTSTATS: u32 = 65;
pub const OP_OFFLOAD_CANCEL: u32 = 66;
pub const OP_OFFLOAD_STATUS: u32 = 67;
pub const OP_READ_PLUS: u32 = 68;
pub const OP_SEEK: u32 = 69;
pub const OP_WRITE_SAME: u32 = 70;
pub const OP_CLONE: u32 = 71;
pub const OP_GETXATTR: u32 = 72;
pub const OP_SETXATTR: u32 = 73;
pub const OP_LISTXATTRS: u32 = 74;
pub const OP_REMOVEXATTR: u32 = 75;
/// Highest operation number known (RFC 8276).
pub const OP_LAST: u32 = OP_REMOVEXATTR;
/// The result's operation for a number outside the known ones (RFC 8881 s16.2.3).
pub const OP_ILLEGAL: u32 = 10044;

// ---------------------------------------------------------------------------
// nfsstat4 (RFC 8881 s15.1)
// ---------------------------------------------------------------------------

pub const NFS4_OK: u32 = 0;
pub const NFS4ERR_PERM: u32 = 1;
pub const NFS4ERR_NOENT: u32 = 2;
pub const NFS4ERR_IO: u32 = 5;
pub const NFS4ERR_NXIO: u32 = 6;
pub const NFS4ERR_ACCESS: u32 = 13;
pub const NFS4ERR_EXIST: u32 = 17;
pub const NFS4ERR_XDEV: u32 = 18;
pub const NFS4ERR_NOTDIR: u32 = 20;
pub const NFS4ERR_ISDIR: u32 = 21;
pub const NFS4ERR_INVAL: u32 = 22;
pub const NFS4ERR_FBIG: u32 = 27;
pub const NFS4ERR_NOSPC: u32 = 28;
pub const NFS4ERR_ROFS: u32 = 30;
pub const NFS4ERR_MLINK: u32 = 31;
pub const NFS4ERR_NAMETOOLONG: u32 = 63;
pub const NFS4ERR_NOTEMPTY: u32 = 66;
pub const NFS4ERR_DQUOT: u32 = 69;
pub const NFS4ERR_STALE: u32 = 70;
pub const NFS4ERR_BADHANDLE: u32 = 10001;
pub const NFS4ERR_BAD_COOKIE: u32 = 10003;
pub const NFS4ERR_NOTSUPP: u32 = 10004;
pub const NFS4ERR_TOOSMALL: u32 = 10005;
pub const NFS4ERR_SERVERFAULT: u32 = 10006;
pub const NFS4ERR_BADTYPE: u32 = 10007;
pub const NFS4ERR_DELAY: u32 = 10008;
pub const NFS4ERR_SAME: u32 = 10009;
pub const NFS4ERR_DENIED: u32 = 10010;
pub const NFS4ERR_EXPIRED: u32 = 10011;
pub const NFS4ERR_LOCKED: u32 = 10012;
pub const NFS4ERR_GRACE: u32 = 10013;
pub const NFS4ERR_FHEXPIRED: u32 = 10014;
pub const NFS4ERR_SHARE_DENIED: u32 = 10015;
pub const NFS4ERR_WRONGSEC: u32 = 10016;
pub const NFS4ERR_CLID_INUSE: u32 = 10017;
pub const NFS4ERR_RESOURCE: u32 = 10018;
pub const NFS4ERR_MOVED: u32 = 10019;
pub const NFS4ERR_NOFILEHANDLE: u32 = 10020;
pub const NFS4ERR_MINOR_VERS_MISMATCH: u32 = 10021;
pub const NFS4ERR_STALE_CLIENTID: u32 = 10022;
pub const NFS4ERR_STALE_STATEID: u32 = 10023;
pub const NFS4ERR_OLD_STATEID: u32 = 10024;
pub const NFS4ERR_BAD_STATEID: u32 = 10025;
pub const NFS4ERR_BAD_SEQID: u32 = 10026;
pub const NFS4ERR_NOT_SAME: u32 = 10027;
pub const NFS4ERR_LOCK_RANGE: u32 = 10028;
pub const NFS4ERR_SYMLINK: u32 = 10029;
pub const NFS4ERR_RESTOREFH: u32 = 10030;
pub const NFS4ERR_LEASE_MOVED: u32 = 10031;
pub const NFS4ERR_ATTRNOTSUPP: u32 = 10032;
pub const NFS4ERR_NO_GRACE: u32 = 10033;
pub const NFS4ERR_RECLAIM_BAD: u32 = 10034;
pub const NFS4ERR_RECLAIM_CONFLICT: u32 = 10035;
pub const NFS4ERR_BADXDR: u32 = 10036;
pub const NFS4ERR_LOCKS_HELD: u32 = 10037;
pub const NFS4ERR_OPENMODE: u32 = 10038;
pub const NFS4ERR_BADOWNER: u32 = 10039;
pub const NFS4ERR_BADCHAR: u32 = 10040;
pub const NFS4ERR_BADNAME: u32 = 10041;
pub const NFS4ERR_BAD_RANGE: u32 = 10042;
pub const NFS4ERR_LOCK_NOTSUPP: u32 = 10043;
pub const NFS4ERR_OP_ILLEGAL: u32 = 10044;
pub const NFS4ERR_DEADLOCK: u32 = 10045;
pub const NFS4ERR_FILE_OPEN: u32 = 10046;
pub const NFS4ERR_ADMIN_REVOKED: u32 = 10047;
pub const NFS4ERR_CB_PATH_DOWN: u32 = 10048;
pub const NFS4ERR_BADIOMODE: u32 = 10049;
pub const NFS4ERR_BADLAYOUT: u32 = 10050;
pub const NFS4ERR_BAD_SESSION_DIGEST: u32 = 10051;
pub const NFS4ERR_BADSESSION: u32 = 10052;
pub const NFS4ERR_BADSLOT: u32 = 10053;
pub const NFS4ERR_COMPLETE_ALREADY: u32 = 10054;
pub const NFS4ERR_CONN_NOT_BOUND_TO_SESSION: u32 = 10055;
pub const NFS4ERR_DELEG_ALREADY_WANTED: u32 = 10056;
pub const NFS4ERR_BACK_CHAN_BUSY: u32 = 10057;
pub const NFS4ERR_LAYOUTTRYLATER: u32 = 10058;
pub const NFS4ERR_LAYOUTUNAVAILABLE: u32 = 10059;
pub const NFS4ERR_NOMATCHING_LAYOUT: u32 = 10060;
pub const NFS4ERR_RECALLCONFLICT: u32 = 10061;
pub const NFS4ERR_UNKNOWN_LAYOUTTYPE: u32 = 10062;
pub const NFS4ERR_SEQ_MISORDERED: u32 = 10063;
pub const NFS4ERR_SEQUENCE_POS: u32 = 10064;
pub const NFS4ERR_REQ_TOO_BIG: u32 = 10065;
pub const NFS4ERR_REP_TOO_BIG: u32 = 10066;
pub const NFS4ERR_REP_TOO_BIG_TO_CACHE: u32 = 10067;
pub const NFS4ERR_RETRY_UNCACHED_REP: u32 = 10068;
pub const NFS4ERR_UNSAFE_COMPOUND: u32 = 10069;
pub const NFS4ERR_TOO_MANY_OPS: u32 = 10070;
pub const NFS4ERR_OP_NOT_IN_SESSION: u32 = 10071;
pub const NFS4ERR_HASH_ALG_UNSUPP: u32 = 10072;
pub const NFS4ERR_CLIENTID_BUSY: u32 = 10074;
pub const NFS4ERR_PNFS_IO_HOLE: u32 = 10075;
pub const NFS4ERR_SEQ_FALSE_RETRY: u32 = 10076;
pub const NFS4ERR_BAD_HIGH_SLOT: u32 = 10077;
pub const NFS4ERR_DEADSESSION: u32 = 10078;
pub const NFS4ERR_ENCR_ALG_UNSUPP: u32 = 10079;
pub const NFS4ERR_PNFS_NO_LAYOUT: u32 = 10080;
pub const NFS4ERR_NOT_ONLY_OP: u32 = 10081;
pub const NFS4ERR_WRONG_CRED: u32 = 10082;
pub const NFS4ERR_WRONG_TYPE: u32 = 10083;
pub const NFS4ERR_DIRDELEG_UNAVAIL: u32 = 10084;
pub const NFS4ERR_REJECT_DELEG: u32 = 10085;
pub const NFS4ERR_RETURNCONFLICT: u32 = 10086;
pub const NFS4ERR_DELEG_REVOKED: u32 = 10087;
// NFSv4.2 (RFC 7862 s11.1).
pub const NFS4ERR_PARTNER_NOTSUPP: u32 = 10088;
pub const NFS4ERR_PARTNER_NO_AUTH: u32 = 10089;
pub const NFS4ERR_UNION_NOTSUPP: u32 = 10090;
pub const NFS4ERR_OFFLOAD_DENIED: u32 = 10091;
pub const NFS4ERR_WRONG_LFS: u32 = 10092;
pub const NFS4ERR_BADLABEL: u32 = 10093;
pub const NFS4ERR_OFFLOAD_NO_REQS: u32 = 10094;

// ---------------------------------------------------------------------------
// Types and enums
// ---------------------------------------------------------------------------

/// `nfs_ftype4`.
pub const NF4REG: u32 = 1;
pub const NF4DIR: u32 = 2;
pub const NF4BLK: u32 = 3;
pub const NF4CHR: u32 = 4;
pub const NF4LNK: u32 = 5;
pub const NF4SOCK: u32 = 6;
pub const NF4FIFO: u32 = 7;
pub const NF4ATTRDIR: u32 = 8;
pub const NF4NAMEDATTR: u32 = 9;

/// `nfs_lock_type4` (RFC 8881 s18.10): the W variants ask the client to
/// be told when a blocked lock may be granted; they are granted or denied
/// at once as the others are.
pub const READ_LT: u32 = 1;
pub const WRITE_LT: u32 = 2;
pub const READW_LT: u32 = 3;
pub const WRITEW_LT: u32 = 4;
/// A lock's `length4` reaching the end of every file (RFC 8881 s18.10.4).
pub const NFS4_LENGTH_EOF: u64 = u64::MAX;

/// `data_content4` of SEEK (RFC 7862 s15.11).
pub const NFS4_CONTENT_DATA: u32 = 0;
pub const NFS4_CONTENT_HOLE: u32 = 1;

/// `netloc_type4` (RFC 7862 s15.2: COPY's source servers).
pub const NL4_NAME: u32 = 1;
pub const NL4_URL: u32 = 2;
pub const NL4_NETADDR: u32 = 3;

/// `stable_how4`.
pub const UNSTABLE4: u32 = 0;
pub const DATA_SYNC4: u32 = 1;
pub const FILE_SYNC4: u32 = 2;

/// `createmode4` (RFC 8881 s18.16).
pub const UNCHECKED4: u32 = 0;
pub const GUARDED4: u32 = 1;
pub const EXCLUSIVE4: u32 = 2;
pub const EXCLUSIVE4_1: u32 = 3;

/// `opentype4`.
pub const OPEN4_NOCREATE: u32 = 0;
pub const OPEN4_CREATE: u32 = 1;

/// `open_claim_type4`.
pub const CLAIM_NULL: u32 = 0;
pub const CLAIM_PREVIOUS: u32 = 1;
pub const CLAIM_DELEGATE_CUR: u32 = 2;
pub const CLAIM_DELEGATE_PREV: u32 = 3;
pub const CLAIM_FH: u32 = 4;
pub const CLAIM_DELEG_CUR_FH: u32 = 5;
pub const CLAIM_DELEG_PREV_FH: u32 = 6;

/// Share access and deny bits (RFC 8881 s18.16.3); the rest of
/// `share_access` holds the 4.1 delegation wants.
pub const OPEN4_SHARE_ACCESS_READ: u32 = 1;
pub const OPEN4_SHARE_ACCESS_WRITE: u32 = 2;
pub const OPEN4_SHARE_ACCESS_BOTH: u32 = 3;
pub const OPEN4_SHARE_DENY_NONE: u32 = 0;
pub const OPEN4_SHARE_DENY_BOTH: u32 = 3;
pub const OPEN4_SHARE_ACCESS_WANT_DELEG_MASK: u32 = 0xff00;
pub const OPEN4_SHARE_ACCESS_WANT_NO_PREFERENCE: u32 = 0x0000;
pub const OPEN4_SHARE_ACCESS_WANT_READ_DELEG: u32 = 0x0100;
pub const OPEN4_SHARE_ACCESS_WANT_WRITE_DELEG: u32 = 0x0200;
pub const OPEN4_SHARE_ACCESS_WANT_ANY_DELEG: u32 = 0x0300;
pub const OPEN4_SHARE_ACCESS_WANT_NO_DELEG: u32 = 0x0400;
pub const OPEN4_SHARE_ACCESS_WANT_CANCEL: u32 = 0x0500;

/// `rflags` of OPEN4resok.
pub const OPEN4_RESULT_CONFIRM: u32 = 2;
pub const OPEN4_RESULT_LOCKTYPE_POSIX: u32 = 4;
pub const OPEN4_RESULT_PRESERVE_UNLINKED: u32 = 8;
pub const OPEN4_RESULT_MAY_NOTIFY_LOCK: u32 = 0x20;

/// `open_delegation_type4`.
pub const OPEN_DELEGATE_NONE: u32 = 0;
pub const OPEN_DELEGATE_READ: u32 = 1;
pub const OPEN_DELEGATE_WRITE: u32 = 2;
pub const OPEN_DELEGATE_NONE_EXT: u32 = 3;
/// `why_no_delegation4`.
pub const WND4_NOT_WANTED: u32 = 0;
pub const WND4_CONTENTION: u32 = 1;
pub const WND4_RESOURCE: u32 = 2;
pub const WND4_NOT_SUPP_FTYPE: u32 = 3;
pub const WND4_WRITE_DELEG_NOT_SUPP_FTYPE: u32 = 4;
pub const WND4_NOT_SUPP_UPGRADE: u32 = 5;
pub const WND4_NOT_SUPP_DOWNGRADE: u32 = 6;
pub const WND4_CANCELLED: u32 = 7;
pub const WND4_IS_DIR: u32 = 8;

/// `acetype4` and `acemask4` bits of the `nfsace4` a delegation carries
/// (RFC 8881 s6.2.1).
pub const ACE4_ACCESS_ALLOWED_ACE_TYPE: u32 = 0;
pub const ACE4_READ_DATA: u32 = 0x1;
pub const ACE4_WRITE_DATA: u32 = 0x2;
pub const ACE4_APPEND_DATA: u32 = 0x4;
/// `limit_by4` (RFC 8881 s18.16.1): a write delegation's space limit as a file size.
pub const NFS_LIMIT_SIZE: u32 = 1;

/// `sr_status_flags` of SEQUENCE (RFC 8881 s18.46.3).
pub const SEQ4_STATUS_CB_PATH_DOWN: u32 = 0x1;
pub const SEQ4_STATUS_CB_GSS_CONTEXTS_EXPIRING: u32 = 0x2;
pub const SEQ4_STATUS_CB_GSS_CONTEXTS_EXPIRED: u32 = 0x4;
pub const SEQ4_STATUS_EXPIRED_ALL_STATE_REVOKED: u32 = 0x8;
pub const SEQ4_STATUS_EXPIRED_SOME_STATE_REVOKED: u32 = 0x10;
pub const SEQ4_STATUS_ADMIN_STATE_REVOKED: u32 = 0x20;
pub const SEQ4_STATUS_RECALLABLE_STATE_REVOKED: u32 = 0x40;
pub const SEQ4_STATUS_LEASE_MOVED: u32 = 0x80;
pub const SEQ4_STATUS_RESTART_RECLAIM_NEEDED: u32 = 0x100;
pub const SEQ4_STATUS_CB_PATH_DOWN_SESSION: u32 = 0x200;
pub const SEQ4_STATUS_BACKCHANNEL_FAULT: u32 = 0x400;
pub const SEQ4_STATUS_DEVID_CHANGED: u32 = 0x800;
pub const SEQ4_STATUS_DEVID_DELETED: u32 = 0x1000;

/// ACCESS4 bits (RFC 8881 s18.1).
pub const ACCESS4_READ: u32 = 0x01;
pub const ACCESS4_LOOKUP: u32 = 0x02;
pub const ACCESS4_MODIFY: u32 = 0x04;
pub const ACCESS4_EXTEND: u32 = 0x08;
pub const ACCESS4_DELETE: u32 = 0x10;
pub const ACCESS4_EXECUTE: u32 = 0x20;

/// `state_protect_how4`.
pub const SP4_NONE: u32 = 0;
pub const SP4_MACH_CRED: u32 = 1;
pub const SP4_SSV: u32 = 2;

/// EXCHANGE_ID flags (RFC 8881 s18.35).
pub const EXCHGID4_FLAG_SUPP_MOVED_REFER: u32 = 0x0000_0001;
pub const EXCHGID4_FLAG_SUPP_MOVED_MIGR: u32 = 0x0000_0002;
pub const EXCHGID4_FLAG_BIND_PRINC_STATEID: u32 = 0x0000_0100;
pub const EXCHGID4_FLAG_USE_NON_PNFS: u32 = 0x0001_0000;
pub const EXCHGID4_FLAG_USE_PNFS_MDS: u32 = 0x0002_0000;
pub const EXCHGID4_FLAG_USE_PNFS_DS: u32 = 0x0004_0000;
pub const EXCHGID4_FLAG_UPD_CONFIRMED_REC_A: u32 = 0x4000_0000;
pub const EXCHGID4_FLAG_CONFIRMED_R: u32 = 0x8000_0000;
/// `EXCHGID4_FLAG_SUPP_FENCE_OPS` (RFC 7862 s15.1: NFSv4.2).
pub const EXCHGID4_FLAG_SUPP_FENCE_OPS: u32 = 0x0000_0004;
/// Flags a client may send (RFC 8881 s18.35.3: others are NFS4ERR_INVAL),
/// with RFC 7862's fence bit.
pub const EXCHGID4_FLAG_MASK_A: u32 = 0x4007_0103 | EXCHGID4_FLAG_SUPP_FENCE_OPS;

/// CREATE_SESSION flags (RFC 8881 s18.36).
pub const CREATE_SESSION4_FLAG_PERSIST: u32 = 0x1;
pub const CREATE_SESSION4_FLAG_CONN_BACK_CHAN: u32 = 0x2;
pub const CREATE_SESSION4_FLAG_CONN_RDMA: u32 = 0x4;

/// `channel_dir_from_client4` (BIND_CONN_TO_SESSION).
pub const CDFC4_FORE: u32 = 0x1;
pub const CDFC4_BACK: u32 = 0x2;
pub const CDFC4_FORE_OR_BOTH: u32 = 0x3;
pub const CDFC4_BACK_OR_BOTH: u32 = 0x7;
/// `channel_dir_from_server4`.
pub const CDFS4_FORE: u32 = 0x1;
pub const CDFS4_BACK: u32 = 0x2;
pub const CDFS4_BOTH: u32 = 0x3;

/// `secinfo_style4` (SECINFO_NO_NAME).
pub const SECINFO_STYLE4_CURRENT_FH: u32 = 0;
pub const SECINFO_STYLE4_PARENT: u32 = 1;

/// `time_how4`.
pub const SET_TO_SERVER_TIME4: u32 = 0;
pub const SET_TO_CLIENT_TIME4: u32 = 1;

/// `fh_expire_type`: handles are persistent.
pub const FH4_PERSISTENT: u32 = 0;

// ---------------------------------------------------------------------------
// Attributes (RFC 8881 s5.8, RFC 7862 s12.2)
// ---------------------------------------------------------------------------

pub const FATTR4_SUPPORTED_ATTRS: u32 = 0;
pub const FATTR4_TYPE: u32 = 1;
pub const FATTR4_FH_EXPIRE_TYPE: u32 = 2;
pub const FATTR4_CHANGE: u32 = 3;
pub const FATTR4_SIZE: u32 = 4;
pub const FATTR4_LINK_SUPPORT: u32 = 5;
pub const FATTR4_SYMLINK_SUPPORT: u32 = 6;
pub const FATTR4_NAMED_ATTR: u32 = 7;
pub const FATTR4_FSID: u32 = 8;
pub const FATTR4_UNIQUE_HANDLES: u32 = 9;
pub const FATTR4_LEASE_TIME: u32 = 10;
pub const FATTR4_RDATTR_ERROR: u32 = 11;
pub const FATTR4_ACL: u32 = 12;
pub const FATTR4_ACLSUPPORT: u32 = 13;
pub const FATTR4_ARCHIVE: u32 = 14;
pub const FATTR4_CANSETTIME: u32 = 15;
pub const FATTR4_CASE_INSENSITIVE: u32 = 16;
pub const FATTR4_CASE_PRESERVING: u32 = 17;
pub const FATTR4_CHOWN_RESTRICTED: u32 = 18;
pub const FATTR4_FILEHANDLE: u32 = 19;
pub const FATTR4_FILEID: u32 = 20;
pub const FATTR4_FILES_AVAIL: u32 = 21;
pub const FATTR4_FILES_FREE: u32 = 22;
pub const FATTR4_FILES_TOTAL: u32 = 23;
pub const FATTR4_FS_LOCATIONS: u32 = 24;
pub const FATTR4_HIDDEN: u32 = 25;
pub const FATTR4_HOMOGENEOUS: u32 = 26;
pub const FATTR4_MAXFILESIZE: u32 = 27;
pub const FATTR4_MAXLINK: u32 = 28;
pub const FATTR4_MAXNAME: u32 = 29;
pub const FATTR4_MAXREAD: u32 = 30;
pub const FATTR4_MAXWRITE: u32 = 31;
pub const FATTR4_MIMETYPE: u32 = 32;
pub const FATTR4_MODE: u32 = 33;
pub const FATTR4_NO_TRUNC: u32 = 34;
pub const FATTR4_NUMLINKS: u32 = 35;
pub const FATTR4_OWNER: u32 = 36;
pub const FATTR4_OWNER_GROUP: u32 = 37;
pub const FATTR4_QUOTA_AVAIL_HARD: u32 = 38;
pub const FATTR4_QUOTA_AVAIL_SOFT: u32 = 39;
pub const FATTR4_QUOTA_USED: u32 = 40;
pub const FATTR4_RAWDEV: u32 = 41;
pub const FATTR4_SPACE_AVAIL: u32 = 42;
pub const FATTR4_SPACE_FREE: u32 = 43;
pub const FATTR4_SPACE_TOTAL: u32 = 44;
pub const FATTR4_SPACE_USED: u32 = 45;
pub const FATTR4_SYSTEM: u32 = 46;
pub const FATTR4_TIME_ACCESS: u32 = 47;
pub const FATTR4_TIME_ACCESS_SET: u32 = 48;
pub const FATTR4_TIME_BACKUP: u32 = 49;
pub const FATTR4_TIME_CREATE: u32 = 50;
pub const FATTR4_TIME_DELTA: u32 = 51;
pub const FATTR4_TIME_METADATA: u32 = 52;
pub const FATTR4_TIME_MODIFY: u32 = 53;
pub const FATTR4_TIME_MODIFY_SET: u32 = 54;
pub const FATTR4_MOUNTED_ON_FILEID: u32 = 55;
pub const FATTR4_SUPPATTR_EXCLCREAT: u32 = 75;

/// A `bitmap4` of at most [`BITMAP_WORDS`] words (the rest were zero).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bitmap {
    pub words: [u32; BITMAP_WORDS],
}

impl Bitmap {
    /// A bitmap of the given attribute numbers (each below 32 × [`BITMAP_WORDS`]).
    pub const fn of(attrs: &[u32]) -> Bitmap {
        let mut words = [0u32; BITMAP_WORDS];
        let mut i = 0;
        while i < attrs.len() {
            words[(attrs[i] / 32) as usize] |= 1 << (attrs[i] % 32);
            i += 1;
        }
        Bitmap { words }
    }
    /// Whether attribute `n` is set.
    pub const fn has(&self, n: u32) -> bool {
        let w = (n / 32) as usize;
        w < BITMAP_WORDS && self.words[w] & (1 << (n % 32)) != 0
    }
    /// The bits of `self` also in `other`.
    pub const fn and(&self, other: &Bitmap) -> Bitmap {
        let mut words = [0u32; BITMAP_WORDS];
        let mut i = 0;
        while i < BITMAP_WORDS {
            words[i] = self.words[i] & other.words[i];
            i += 1;
        }
        Bitmap { words }
    }
    /// Whether no bit is set.
    pub const fn is_empty(&self) -> bool {
        let mut i = 0;
        while i < BITMAP_WORDS {
            if self.words[i] != 0 {
                return false;
            }
            i += 1;
        }
        true
    }
    /// Words to encode: through the last non-zero one.
    pub fn encoded_words(&self) -> &[u32] {
        let n = self.words.iter().rposition(|&w| w != 0).map_or(0, |i| i + 1);
        &self.words[..n]
    }
    /// The bits of `self` not in `other`.
    pub const fn and_not(&self, other: &Bitmap) -> Bitmap {
        let mut words = [0u32; BITMAP_WORDS];
        let mut i = 0;
        while i < BITMAP_WORDS {
            words[i] = self.words[i] & !other.words[i];
            i += 1;
        }
        Bitmap { words }
    }
    /// Attribute numbers set, ascending. Visits only the set bits (a
    /// trailing-zero count per bit, not a test of all 96 positions: a
    /// GETATTR's encoder walks this once per Call).
    pub fn iter(&self) -> BitmapIter {
        BitmapIter {
            words: self.words,
            word: 0,
        }
    }
}

/// The set bits of a [`Bitmap`], ascending ([`Bitmap::iter`]).
#[derive(Clone, Debug)]
pub struct BitmapIter {
    /// The bits not yet returned.
    words: [u32; BITMAP_WORDS],
    /// The word the next bit is looked for in.
    word: usize,
}

impl Iterator for BitmapIter {
    type Item = u32;

    #[inline]
    fn next(&mut self) -> Option<u32> {
        while self.word < BITMAP_WORDS {
            let w = self.words[self.word];
            if w != 0 {
                // Clear the lowest set bit and return its number.
                self.words[self.word] = w & (w - 1);
                return Some(self.word as u32 * 32 + w.trailing_zeros());
            }
            self.word += 1;
        }
        None
    }
}

/// `stateid4` (RFC 8881 s3.3.12).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Stateid {
    pub seqid: u32,
    pub other: [u8; NFS4_OTHER_SIZE],
}

impl Stateid {
    /// The anonymous stateid (all zero, RFC 8881 s8.2.3).
    pub const ANONYMOUS: Stateid = Stateid {
        seqid: 0,
        other: [0; NFS4_OTHER_SIZE],
    };
    /// The READ bypass stateid (all ones).
    pub const BYPASS: Stateid = Stateid {
        seqid: u32::MAX,
        other: [0xff; NFS4_OTHER_SIZE],
    };
    /// The current stateid (seqid 1, other zero).
    pub const CURRENT: Stateid = Stateid {
        seqid: 1,
        other: [0; NFS4_OTHER_SIZE],
    };
    /// The invalid stateid (seqid all ones, other zero).
    pub const INVALID: Stateid = Stateid {
        seqid: u32::MAX,
        other: [0; NFS4_OTHER_SIZE],
    };
    /// Whether this is one of the special stateids of RFC 8881 s8.2.3
    /// (`other` all zero or all ones).
    pub fn is_special(&self) -> bool {
        self.other == [0; NFS4_OTHER_SIZE] || self.other == [0xff; NFS4_OTHER_SIZE]
    }
}

/// `sessionid4`.
pub type SessionId = [u8; NFS4_SESSIONID_SIZE];
/// `verifier4`.
pub type Verifier = [u8; NFS4_VERIFIER_SIZE];
