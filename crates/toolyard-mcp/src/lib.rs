//! toolyard-mcp
