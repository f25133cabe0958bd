//! File tools: read_file, write_file, edit_file.
