//! Web tools: web_fetch, web_search.
