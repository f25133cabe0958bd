//! toolyard-tools
