//! Search tools: grep, glob, list_directory.
