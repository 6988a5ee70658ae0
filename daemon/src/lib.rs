//! canaryd: the daemon and CLI.
