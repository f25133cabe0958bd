//! toolyard-workspace
