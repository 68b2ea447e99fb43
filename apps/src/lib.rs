//! rpcrdma applications
