//! HTML to clean Markdown: main-content extraction (dom_smoothie, a port of readability.js),
//! then htmd; the whole body through htmd when no article stands out.

use htmd::HtmlToMarkdown;

/// Tags whose content is never text for a reader.
const SKIP_ALWAYS: &[&str] = &[
    "script", "style", "noscript", "template", "iframe", "svg", "canvas", "object", "embed", "head",
];

/// Page furniture dropped when converting a whole body (no article found).
const SKIP_FURNITURE: &[&str] = &[
    "nav", "header", "footer", "aside", "form", "button", "dialog",
];

/// Extracted articles shorter than this (in characters of text) are not trusted: the page is
/// probably an index or an app shell, and the whole body says more.
const MIN_ARTICLE_CHARS: usize = 200;

/// Turn an HTML page into Markdown: its main content when one can be found (with its title as
/// a heading), else the body without navigation, scripts and styles. `url` resolves relative
/// links.
pub fn html_to_markdown(html: &str, url: Option<&str>) -> String {
    if let Some(md) = article_markdown(html, url) {
        return md;
    }
    let mut skip: Vec<&str> = SKIP_ALWAYS.to_vec();
    skip.extend_from_slice(SKIP_FURNITURE);
    let converter = HtmlToMarkdown::builder().skip_tags(skip).build();
    match converter.convert(html) {
        Ok(md) => tidy(&md),
        // htmd only fails on I/O inside html5ever, which an in-memory string does not do.
        Err(_) => tidy(&strip_tags(html)),
    }
}

fn article_markdown(html: &str, url: Option<&str>) -> Option<String> {
    let cfg = dom_smoothie::Config {
        max_elements_to_parse: 50_000,
        ..Default::default()
    };
    // A URL readability cannot use only costs link resolution; try without it.
    let mut reader = dom_smoothie::Readability::new(html, url, Some(cfg.clone()))
        .or_else(|_| dom_smoothie::Readability::new(html, None, Some(cfg)))
        .ok()?;
    let article = reader.parse().ok()?;
    if article.text_content.trim().chars().count() < MIN_ARTICLE_CHARS {
        return None;
    }
    let converter = HtmlToMarkdown::builder()
        .skip_tags(SKIP_ALWAYS.to_vec())
        .build();
    let body = tidy(&converter.convert(&article.content).ok()?);
    if body.is_empty() {
        return None;
    }
    let title = article.title.trim();
    if title.is_empty() || body.starts_with(&format!("# {title}")) {
        Some(body)
    } else {
        Some(format!("# {title}\n\n{body}"))
    }
}

/// Collapse runs of blank lines and trim trailing spaces.
fn tidy(md: &str) -> String {
    let mut out = String::with_capacity(md.len());
    let mut blank = 0;
    for line in md.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            blank += 1;
            if blank > 1 {
                continue;
            }
        } else {
            blank = 0;
        }
        out.push_str(line);
        out.push('\n');
    }
    out.trim().to_string() + "\n"
}

/// A last resort: text between tags.
fn strip_tags(html: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_page_falls_back_to_body_without_furniture() {
        let md = html_to_markdown(
            "<html><body><nav><a href='/'>Home</a></nav><h1>Hi</h1><p>Hello <b>there</b></p><script>alert(1)</script></body></html>",
            None,
        );
        assert!(md.contains("# Hi"), "{md}");
        assert!(md.contains("Hello **there**"), "{md}");
        assert!(!md.contains("alert"), "{md}");
        assert!(!md.contains("Home"), "{md}");
    }
}
