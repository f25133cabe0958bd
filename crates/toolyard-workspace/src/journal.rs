//! journal (in progress)
