//! read_file beyond text: images as image blocks, PDFs page by page, notebooks cell by cell,
//! and other binaries refused with what they are.

use std::fs;
use std::sync::Arc;

use lopdf::content::{Content, Operation};
use lopdf::{Document, Object, Stream, dictionary};
use serde_json::{Value, json};
use toolyard_core::{Catalog, Tool, ToolContext, ToolResult, Typed};
use toolyard_tools::ToolEnv;
use toolyard_tools::files::ReadFile;

/// A 1x1 PNG (base64 of the file's bytes).
const PNG_1X1: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

struct Fixture {
    dir: tempfile::TempDir,
    env: Arc<ToolEnv>,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join(".test-state");
        let env = Arc::new(
            ToolEnv::open_with_state(dir.path(), Catalog::builtin(), Some(&state))
                .expect("open env"),
        );
        Self { dir, env }
    }

    fn write(&self, rel: &str, content: &[u8]) {
        fs::write(self.dir.path().join(rel), content).expect("write");
    }

    async fn read(&self, args: Value) -> ToolResult {
        let ctx = ToolContext::new(self.env.workspace.root(), "read-media-test");
        ToolResult::from(
            Typed(ReadFile::new(self.env.clone()))
                .invoke(args, &ctx)
                .await,
        )
    }
}

fn png() -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(PNG_1X1)
        .expect("png base64")
}

#[tokio::test]
async fn a_png_comes_back_as_an_image_with_a_line_saying_what_it_is() {
    let f = Fixture::new();
    f.write("dot.png", &png());
    let r = f.read(json!({"path": "dot.png"})).await;
    assert!(r.success, "{}", r.output);
    assert!(r.output.contains("PNG, 1x1 pixels"), "{}", r.output);
    assert!(r.output.contains("returned as an image"), "{}", r.output);
    assert_eq!(r.images.len(), 1);
    assert_eq!(r.images[0].mime_type, "image/png");
    assert_eq!(r.images[0].data, PNG_1X1);
}

#[tokio::test]
async fn gif_jpeg_and_webp_are_known_by_their_magic_bytes_not_their_names() {
    let f = Fixture::new();
    let mut gif = b"GIF89a\x02\x00\x03\x00\x00\x00\x00".to_vec();
    gif.extend_from_slice(&[0; 16]);
    f.write("a.dat", &gif);
    f.write(
        "b.bin",
        b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01",
    );
    f.write("c", b"RIFF\x24\x00\x00\x00WEBPVP8 \x18\x00\x00\x00");
    for (path, mime) in [
        ("a.dat", "image/gif"),
        ("b.bin", "image/jpeg"),
        ("c", "image/webp"),
    ] {
        let r = f.read(json!({"path": path})).await;
        assert!(r.success, "{path}: {}", r.output);
        assert_eq!(
            r.images.first().map(|i| i.mime_type.as_str()),
            Some(mime),
            "{path}"
        );
    }
    let r = f.read(json!({"path": "a.dat"})).await;
    assert!(r.output.contains("GIF, 2x3 pixels"), "{}", r.output);
}

/// An image of `w`x`h` pixels with a gradient (so it compresses like a picture, not noise).
fn picture(w: u32, h: u32) -> image::RgbImage {
    image::RgbImage::from_fn(w, h, |x, y| {
        image::Rgb([(x % 256) as u8, (y % 256) as u8, 128])
    })
}

fn encoded(img: &image::RgbImage, format: image::ImageFormat) -> Vec<u8> {
    let mut out = Vec::new();
    img.write_to(&mut std::io::Cursor::new(&mut out), format)
        .expect("encode");
    out
}

/// The sent image decoded again: its format and size.
fn sent(r: &ToolResult) -> (image::ImageFormat, u32, u32) {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(&r.images[0].data)
        .expect("base64");
    let format = image::guess_format(&bytes).expect("a known format");
    let img = image::load_from_memory(&bytes).expect("decodes");
    (format, img.width(), img.height())
}

#[tokio::test]
async fn a_large_png_is_scaled_down_as_png_keeping_its_aspect_ratio() {
    let f = Fixture::new();
    f.write(
        "big.png",
        &encoded(&picture(3000, 2000), image::ImageFormat::Png),
    );
    let r = f.read(json!({"path": "big.png"})).await;
    assert!(r.success, "{}", r.output);
    assert_eq!(sent(&r), (image::ImageFormat::Png, 1568, 1045));
    assert_eq!(r.images[0].mime_type, "image/png");
    assert!(r.output.contains("PNG, 3000x2000 pixels"), "{}", r.output);
    assert!(
        r.output.contains("scaled down to 1568x1045 pixels (PNG"),
        "{}",
        r.output
    );
    let data = r.data.as_ref().unwrap();
    assert_eq!(data["original"]["width"], 3000);
    assert_eq!(data["scaled"], true);
}

#[tokio::test]
async fn a_large_jpeg_is_scaled_down_as_jpeg() {
    let f = Fixture::new();
    f.write(
        "wide.jpg",
        &encoded(&picture(4000, 1000), image::ImageFormat::Jpeg),
    );
    let r = f.read(json!({"path": "wide.jpg"})).await;
    assert!(r.success, "{}", r.output);
    assert_eq!(sent(&r), (image::ImageFormat::Jpeg, 1568, 392));
    assert_eq!(r.images[0].mime_type, "image/jpeg");
    assert!(r.output.contains("JPEG, 4000x1000 pixels"), "{}", r.output);
}

#[tokio::test]
async fn an_image_over_the_byte_cap_is_re_encoded_under_it() {
    let f = Fixture::new();
    // A 1x1 PNG followed by 6 MB of padding the decoder ignores.
    let mut big = png();
    big.resize(6_000_000, 0);
    f.write("big.png", &big);
    let r = f.read(json!({"path": "big.png"})).await;
    assert!(r.success, "{}", r.output);
    assert!(
        r.output.contains("6000000 bytes; scaled down to 1x1"),
        "{}",
        r.output
    );
    assert!(r.images[0].data.len() < 1000);
}

#[tokio::test]
async fn a_decompression_bomb_is_refused_from_its_header_without_decoding() {
    let f = Fixture::new();
    // A PNG header claiming 100000x100000 RGBA pixels (40 GB decoded), and no data.
    let mut bomb = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR".to_vec();
    bomb.extend_from_slice(&100_000u32.to_be_bytes());
    bomb.extend_from_slice(&100_000u32.to_be_bytes());
    bomb.extend_from_slice(&[8, 6, 0, 0, 0, 0, 0, 0, 0]);
    bomb.resize(6_000_000, 0);
    f.write("bomb.png", &bomb);
    let r = f.read(json!({"path": "bomb.png"})).await;
    assert!(!r.success, "{}", r.output);
    assert!(r.output.contains("100000x100000 pixels"), "{}", r.output);
    assert!(r.output.contains("not decoded"), "{}", r.output);
    assert!(r.output.contains("-resize"), "what to do: {}", r.output);
    assert!(r.images.is_empty());
}

#[tokio::test]
async fn a_large_image_that_cannot_be_decoded_is_refused_with_what_to_do() {
    let f = Fixture::new();
    // A JPEG's first bytes, then nothing a decoder can use.
    let mut broken = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01".to_vec();
    broken.resize(6_000_000, 0x55);
    f.write("broken.jpg", &broken);
    let r = f.read(json!({"path": "broken.jpg"})).await;
    assert!(!r.success, "{}", r.output);
    assert!(r.output.contains("cannot be decoded"), "{}", r.output);
    assert!(r.output.contains("-resize"), "{}", r.output);
    assert!(r.images.is_empty());
}

/// A PDF of `pages` pages, page N saying "This is page N".
fn pdf(pages: u32) -> Vec<u8> {
    let mut doc = Document::with_version("1.5");
    let pages_id = doc.new_object_id();
    let font_id = doc.add_object(dictionary! {
        "Type" => "Font",
        "Subtype" => "Type1",
        "BaseFont" => "Courier",
        "Encoding" => "WinAnsiEncoding",
    });
    let resources_id = doc.add_object(dictionary! {"Font" => dictionary! {"F1" => font_id}});
    let mut kids = Vec::new();
    for n in 1..=pages {
        let content = Content {
            operations: vec![
                Operation::new("BT", vec![]),
                Operation::new("Tf", vec!["F1".into(), 12.into()]),
                Operation::new("Td", vec![72.into(), 700.into()]),
                Operation::new(
                    "Tj",
                    vec![Object::string_literal(format!("This is page {n}"))],
                ),
                Operation::new("ET", vec![]),
            ],
        };
        let content_id = doc.add_object(Stream::new(
            dictionary! {},
            content.encode().expect("encode"),
        ));
        let page_id = doc.add_object(dictionary! {
            "Type" => "Page",
            "Parent" => pages_id,
            "Contents" => content_id,
        });
        kids.push(page_id.into());
    }
    doc.objects.insert(
        pages_id,
        Object::Dictionary(dictionary! {
            "Type" => "Pages",
            "Kids" => kids,
            "Count" => pages,
            "Resources" => resources_id,
            "MediaBox" => vec![0.into(), 0.into(), 595.into(), 842.into()],
        }),
    );
    let catalog_id = doc.add_object(dictionary! {"Type" => "Catalog", "Pages" => pages_id});
    doc.trailer.set("Root", catalog_id);
    let mut out = Vec::new();
    doc.save_to(&mut out).expect("save pdf");
    out
}

#[tokio::test]
async fn a_pdf_is_read_page_by_page() {
    let f = Fixture::new();
    f.write("doc.pdf", &pdf(5));
    let all = f.read(json!({"path": "doc.pdf"})).await;
    assert!(all.success, "{}", all.output);
    assert!(
        all.output
            .starts_with("PDF doc.pdf: 5 pages; showing pages 1-5."),
        "{}",
        all.output
    );
    assert!(
        all.output.contains("--- page 1 ---\nThis is page 1"),
        "{}",
        all.output
    );
    assert!(
        all.output.contains("--- page 5 ---\nThis is page 5"),
        "{}",
        all.output
    );

    let some = f.read(json!({"path": "doc.pdf", "pages": "2-3"})).await;
    assert!(some.success, "{}", some.output);
    assert!(
        some.output.contains("showing pages 2-3."),
        "{}",
        some.output
    );
    assert!(some.output.contains("This is page 2") && some.output.contains("This is page 3"));
    assert!(!some.output.contains("This is page 1") && !some.output.contains("This is page 4"));

    let one = f.read(json!({"path": "doc.pdf", "pages": "5"})).await;
    assert!(one.output.contains("showing page 5."), "{}", one.output);

    let past = f.read(json!({"path": "doc.pdf", "pages": "9"})).await;
    assert!(!past.success);
    assert!(past.output.contains("has 5 pages"), "{}", past.output);

    f.write("notes.txt", b"plain\n");
    let text = f.read(json!({"path": "notes.txt", "pages": "1"})).await;
    assert!(!text.success);
    assert!(text.output.contains("PDF files only"), "{}", text.output);
}

#[tokio::test]
async fn a_notebook_shows_numbered_cells_with_their_outputs() {
    let f = Fixture::new();
    let nb = json!({
        "nbformat": 4, "nbformat_minor": 5,
        "metadata": {"kernelspec": {"language": "python", "name": "python3"}},
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": ["# Title\n", "Some prose."]},
            {"cell_type": "code", "execution_count": 1, "metadata": {}, "source": "print('hi')",
             "outputs": [{"output_type": "stream", "name": "stdout", "text": ["hi\n"]}]},
            {"cell_type": "code", "execution_count": 2, "metadata": {}, "source": ["plot()"],
             "outputs": [{"output_type": "display_data", "metadata": {},
                          "data": {"image/png": "iVBOR...", "text/plain": ["<Figure>"]}}]},
            {"cell_type": "code", "execution_count": 3, "metadata": {}, "source": "1/0",
             "outputs": [{"output_type": "error", "ename": "ZeroDivisionError",
                          "evalue": "division by zero",
                          "traceback": ["\u{1b}[0;31mZeroDivisionError\u{1b}[0m: division by zero"]}]}
        ]
    });
    f.write("nb.ipynb", nb.to_string().as_bytes());
    let r = f.read(json!({"path": "nb.ipynb"})).await;
    assert!(r.success, "{}", r.output);
    let expected = "Notebook nb.ipynb: 4 cells (python).\n\
        --- cell 1 [markdown] ---\n# Title\nSome prose.\n\
        --- cell 2 [code] (execution 1) ---\nprint('hi')\n--- output ---\nhi\n\
        --- cell 3 [code] (execution 2) ---\nplot()\n--- output ---\n[image: image/png]\n<Figure>\n\
        --- cell 4 [code] (execution 3) ---\n1/0\n--- output ---\nZeroDivisionError: division by zero\n";
    assert_eq!(r.output, expected);
}

#[tokio::test]
async fn other_binaries_are_refused_with_what_they_are_and_what_to_do() {
    let f = Fixture::new();
    let mut zip = b"PK\x03\x04\x14\x00\x00\x00".to_vec();
    zip.extend_from_slice(&[0; 64]);
    f.write("bundle.docx", &zip);
    let r = f.read(json!({"path": "bundle.docx"})).await;
    assert!(!r.success);
    assert_eq!(r.error_kind.as_deref(), Some("binary"));
    assert!(r.output.contains("a ZIP archive"), "{}", r.output);
    assert!(r.output.contains("unzip -l bundle.docx"), "{}", r.output);

    let mut elf = b"\x7fELF\x02\x01\x01".to_vec();
    elf.extend_from_slice(&[0; 64]);
    f.write("prog", &elf);
    let r = f.read(json!({"path": "prog"})).await;
    assert!(r.output.contains("an ELF executable"), "{}", r.output);

    f.write("blob", &[0u8, 1, 2, 3, 0, 0, 9]);
    let r = f.read(json!({"path": "blob"})).await;
    assert!(r.output.contains("non-text bytes"), "{}", r.output);
    assert!(r.output.contains("file blob"), "{}", r.output);
}

#[tokio::test]
async fn text_still_reads_as_numbered_lines() {
    let f = Fixture::new();
    // Shorter than the 16 sniffed bytes, and longer: both come back whole.
    f.write("short.txt", b"hi\n");
    f.write("long.txt", b"first line of text\nsecond\n");
    assert_eq!(
        f.read(json!({"path": "short.txt"})).await.output,
        "     1|hi\n"
    );
    assert_eq!(
        f.read(json!({"path": "long.txt"})).await.output,
        "     1|first line of text\n     2|second\n"
    );
}

/// `dialect`'s `read_file` over the fixture's workspace.
async fn dialect_read(f: &Fixture, dialect: toolyard_dialects::Dialect, args: Value) -> ToolResult {
    let tools = toolyard_dialects::tools(&f.env, dialect).expect("tools");
    let read = tools
        .iter()
        .find(|t| t.tool.name() == "read_file")
        .expect("read_file");
    assert!(
        read.tool.returns_images(),
        "{dialect} read_file declares images"
    );
    let ctx = ToolContext::new(f.env.workspace.root(), "read-media-test");
    ToolResult::from(read.tool.invoke(args, &ctx).await)
}

#[tokio::test]
async fn loom_and_loom_py_read_images_pdfs_and_notebooks_through_the_engine() {
    use toolyard_dialects::Dialect;
    let f = Fixture::new();
    f.write("dot.png", &png());
    f.write("two.pdf", &pdf(2));
    let nb = json!({
        "nbformat": 4, "nbformat_minor": 5, "metadata": {},
        "cells": [{"cell_type": "code", "execution_count": 1, "metadata": {},
                   "source": "print('hi')",
                   "outputs": [{"output_type": "stream", "name": "stdout", "text": "hi\n"}]}]
    });
    f.write("n.ipynb", nb.to_string().as_bytes());

    // loom: its {path, contents, truncated} shape, the image block beside it.
    let r = dialect_read(&f, Dialect::Loom, json!({"path": "dot.png"})).await;
    assert!(r.success, "{}", r.output);
    assert_eq!(r.images.len(), 1);
    assert_eq!(r.images[0].data, PNG_1X1);
    let data = r.data.clone().unwrap();
    assert!(
        data["contents"]
            .as_str()
            .unwrap()
            .contains("PNG, 1x1 pixels"),
        "{data}"
    );
    assert_eq!(data["truncated"], false);
    let r = dialect_read(&f, Dialect::Loom, json!({"path": "two.pdf"})).await;
    let contents = r.data.clone().unwrap()["contents"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(contents.contains("This is page 2"), "{contents}");
    let r = dialect_read(&f, Dialect::Loom, json!({"path": "n.ipynb"})).await;
    let contents = r.data.clone().unwrap()["contents"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        contents.contains("print('hi')") && contents.contains("hi"),
        "{contents}"
    );

    // loom-py: text and data as the engine gives them.
    let r = dialect_read(&f, Dialect::LoomPy, json!({"path": "dot.png"})).await;
    assert!(r.success, "{}", r.output);
    assert_eq!(r.images.len(), 1);
    assert_eq!(r.data.clone().unwrap()["kind"], "image");
    let r = dialect_read(&f, Dialect::LoomPy, json!({"path": "two.pdf"})).await;
    assert!(r.output.contains("This is page 1"), "{}", r.output);
    let r = dialect_read(&f, Dialect::LoomPy, json!({"path": "n.ipynb"})).await;
    assert!(r.output.contains("print('hi')"), "{}", r.output);
    let r = dialect_read(
        &f,
        Dialect::LoomPy,
        json!({"path": "two.pdf", "line_range": [1, 2]}),
    )
    .await;
    assert!(
        !r.success && r.output.contains("line_range"),
        "{}",
        r.output
    );
    // Text is still each seed's own.
    f.write("t.txt", b"one\ntwo\n");
    let r = dialect_read(&f, Dialect::LoomPy, json!({"path": "t.txt"})).await;
    assert_eq!(r.output, "one\ntwo\n");
    let r = dialect_read(&f, Dialect::Loom, json!({"path": "t.txt"})).await;
    assert_eq!(r.data.unwrap()["contents"], "one\ntwo\n");
}

/// Every dialect's tool that reads a file (and Anthropic's editor, whose `view` reads) answers
/// a PNG with an image block, and declares no output schema: a client checks a result against
/// one, and an image result goes without `structuredContent`.
#[tokio::test]
async fn every_dialects_reader_returns_a_png_as_an_image_and_declares_no_output_schema() {
    use toolyard_dialects::Dialect;
    let f = Fixture::new();
    f.write("dot.png", &png());
    let readers: &[(Dialect, &str, Value)] = &[
        (Dialect::Loopr, "read_file", json!({"path": "dot.png"})),
        (Dialect::Loom, "read_file", json!({"path": "dot.png"})),
        (Dialect::LoomPy, "read_file", json!({"path": "dot.png"})),
        (
            Dialect::Gemini,
            "read_file",
            json!({"file_path": "dot.png"}),
        ),
        (Dialect::ClaudeCode, "Read", json!({"file_path": "dot.png"})),
        (
            Dialect::Anthropic,
            "str_replace_based_edit_tool",
            json!({"command": "view", "path": "dot.png"}),
        ),
    ];
    for dialect in Dialect::ALL {
        let tools = toolyard_dialects::tools(&f.env, dialect).expect("tools");
        for t in &tools {
            // Gemini's read_many_files answers text only (binary files are listed as skipped).
            let reads = (t.engine == "read_file" && t.tool.name() != "read_many_files")
                || t.tool.name().starts_with("str_replace");
            let def = toolyard_core::ToolDefinition::of(t.tool.as_ref(), None);
            assert_eq!(
                def.output_schema.is_none(),
                reads,
                "{dialect} {}: a tool that may return an image declares no output schema, \
                 the others do",
                t.tool.name()
            );
        }
        let Some((_, name, args)) = readers.iter().find(|(d, _, _)| *d == dialect) else {
            continue;
        };
        let tool = &tools
            .iter()
            .find(|t| t.tool.name() == *name)
            .expect("the reader")
            .tool;
        let ctx = ToolContext::new(f.env.workspace.root(), "read-media-test");
        let r = ToolResult::from(tool.invoke(args.clone(), &ctx).await);
        assert!(r.success, "{dialect} {name}: {}", r.output);
        assert_eq!(r.images.len(), 1, "{dialect} {name}: {}", r.output);
        assert_eq!(r.images[0].data, PNG_1X1, "{dialect} {name}");
        assert_eq!(r.images[0].mime_type, "image/png", "{dialect} {name}");
    }
}
