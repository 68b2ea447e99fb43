//! placeholder, see issues
