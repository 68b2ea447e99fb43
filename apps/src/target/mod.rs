//! rpcrdma-target: being written.
