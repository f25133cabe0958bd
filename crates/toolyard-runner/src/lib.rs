//! toolyard-runner
