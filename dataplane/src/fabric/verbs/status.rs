//! Translation of `ibv_wc` status and opcode values into the fabric's
//! [`WcStatus`] and [`WcOpcode`]. Pure code: no device needed.

use rdma_mummy_sys::{ibv_wc_opcode as op, ibv_wc_status as st};

use crate::fabric::{WcOpcode, WcStatus};

/// Map an `enum ibv_wc_status` value. Statuses the engine does not act on
/// separately (e.g. `IBV_WC_REM_OP_ERR`, `IBV_WC_FATAL_ERR`, unknown values)
/// become [`WcStatus::General`].
pub fn wc_status(s: st::Type) -> WcStatus {
    match s {
        st::IBV_WC_SUCCESS => WcStatus::Success,
        st::IBV_WC_LOC_LEN_ERR => WcStatus::LocalLength,
        st::IBV_WC_LOC_PROT_ERR => WcStatus::LocalProtection,
        st::IBV_WC_WR_FLUSH_ERR => WcStatus::Flushed,
        st::IBV_WC_REM_ACCESS_ERR => WcStatus::RemoteAccess,
        st::IBV_WC_REM_INV_REQ_ERR => WcStatus::RemoteInvalidRequest,
        st::IBV_WC_RNR_RETRY_EXC_ERR => WcStatus::RnrRetryExceeded,
        st::IBV_WC_RETRY_EXC_ERR => WcStatus::RetryExceeded,
        _ => WcStatus::General,
    }
}

/// Map an `enum ibv_wc_opcode` value of a *successful* completion (the field is
/// undefined in error completions: the provider takes the opcode from its own
/// record of the work request then). A Memory Window bind completes as a
/// [`WcOpcode::Send`] (it is a send-queue work request).
pub fn wc_opcode(o: op::Type) -> Option<WcOpcode> {
    match o {
        op::IBV_WC_SEND | op::IBV_WC_BIND_MW => Some(WcOpcode::Send),
        op::IBV_WC_RDMA_WRITE => Some(WcOpcode::RdmaWrite),
        op::IBV_WC_RDMA_READ => Some(WcOpcode::RdmaRead),
        op::IBV_WC_RECV | op::IBV_WC_RECV_RDMA_WITH_IMM => Some(WcOpcode::Recv),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_the_engine_acts_on_are_distinct() {
        let cases = [
            (st::IBV_WC_SUCCESS, WcStatus::Success),
            (st::IBV_WC_LOC_LEN_ERR, WcStatus::LocalLength),
            (st::IBV_WC_LOC_PROT_ERR, WcStatus::LocalProtection),
            (st::IBV_WC_WR_FLUSH_ERR, WcStatus::Flushed),
            (st::IBV_WC_REM_ACCESS_ERR, WcStatus::RemoteAccess),
            (st::IBV_WC_REM_INV_REQ_ERR, WcStatus::RemoteInvalidRequest),
            (st::IBV_WC_RNR_RETRY_EXC_ERR, WcStatus::RnrRetryExceeded),
            (st::IBV_WC_RETRY_EXC_ERR, WcStatus::RetryExceeded),
        ];
        for (raw, want) in cases {
            assert_eq!(wc_status(raw), want, "status {raw}");
        }
        // Values from <infiniband/verbs.h>, so a renumbered binding is caught.
        assert_eq!((st::IBV_WC_WR_FLUSH_ERR, st::IBV_WC_REM_ACCESS_ERR), (5, 10));
        assert_eq!((st::IBV_WC_RETRY_EXC_ERR, st::IBV_WC_RNR_RETRY_EXC_ERR), (12, 13));
    }

    #[test]
    fn other_statuses_are_general_and_only_success_is_success() {
        for raw in [
            st::IBV_WC_LOC_QP_OP_ERR,
            st::IBV_WC_MW_BIND_ERR,
            st::IBV_WC_BAD_RESP_ERR,
            st::IBV_WC_LOC_ACCESS_ERR,
            st::IBV_WC_REM_OP_ERR,
            st::IBV_WC_REM_ABORT_ERR,
            st::IBV_WC_FATAL_ERR,
            st::IBV_WC_RESP_TIMEOUT_ERR,
            st::IBV_WC_GENERAL_ERR,
            999,
        ] {
            assert_eq!(wc_status(raw), WcStatus::General, "status {raw}");
        }
        for raw in 0..=st::IBV_WC_TM_RNDV_INCOMPLETE + 3 {
            assert_eq!(wc_status(raw).is_success(), raw == st::IBV_WC_SUCCESS);
        }
    }

    #[test]
    fn opcodes() {
        assert_eq!(wc_opcode(op::IBV_WC_SEND), Some(WcOpcode::Send));
        assert_eq!(wc_opcode(op::IBV_WC_BIND_MW), Some(WcOpcode::Send));
        assert_eq!(wc_opcode(op::IBV_WC_RDMA_WRITE), Some(WcOpcode::RdmaWrite));
        assert_eq!(wc_opcode(op::IBV_WC_RDMA_READ), Some(WcOpcode::RdmaRead));
        assert_eq!(wc_opcode(op::IBV_WC_RECV), Some(WcOpcode::Recv));
        assert_eq!(wc_opcode(op::IBV_WC_RECV_RDMA_WITH_IMM), Some(WcOpcode::Recv));
        assert_eq!(wc_opcode(op::IBV_WC_COMP_SWAP), None);
        assert_eq!(op::IBV_WC_RECV, 128);
    }
}
