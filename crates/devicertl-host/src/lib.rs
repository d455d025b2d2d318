//! Device runtime for the CPU target (work in progress).
