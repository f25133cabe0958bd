//! The command policy: decides on the parsed command (tree-sitter-bash), not on its text.
