//! The bundled model: its checksum, determinism, and cross-language retrieval.

use sha2::{Digest, Sha256};
use toolshelf_embed::{Embedder, bundled_files, recorded_sha256};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn bundled_files_match_the_recorded_checksums() {
    let files = bundled_files().expect("built with the bundled model");
    for (name, bytes) in files {
        let got = hex(&Sha256::digest(bytes));
        assert_eq!(Some(got.as_str()), recorded_sha256(name), "{name}");
    }
}

#[test]
fn embeddings_are_deterministic_and_fixed() {
    let e = Embedder::bundled().expect("model loads");
    assert_eq!(e.dim(), 256);
    let text = "Read the complete contents of a file 读取文件内容";
    let a = e.embed(text);
    let b = e.embed(text);
    assert_eq!(a, b);
    assert!(a.iter().any(|&x| x != 0));
    // The quantised bytes are pinned: a change of model, tokenizer or rounding shows here.
    let bytes: Vec<u8> = a.iter().map(|&x| x as u8).collect();
    insta::assert_snapshot!(hex(&Sha256::digest(&bytes)));
}

fn cos(e: &Embedder, a: &str, b: &str) -> f32 {
    let (x, y) = (e.embed_f32(a), e.embed_f32(b));
    x.iter().zip(&y).map(|(p, q)| p * q).sum()
}

#[test]
fn translations_are_closer_than_unrelated_text() {
    let e = Embedder::bundled().expect("model loads");
    // Phrases chosen for this test, none of them among the pairs that
    // scripts/distill-embeddings/check.py used to choose the distillation recipe: a model that only
    // fits those would not pass here.
    let pairs = [
        ("rename a folder", "重命名文件夹", "订购披萨"),
        ("send a text message", "发送短信", "重命名文件夹"),
        ("resize an image", "调整图片大小", "发送短信"),
        ("stop the container", "停止容器", "调整图片大小"),
        ("export a spreadsheet", "导出电子表格", "停止容器"),
        ("order a pizza", "订购披萨", "导出电子表格"),
    ];
    for (en, zh, other) in pairs {
        let related = cos(e, en, zh);
        let unrelated = cos(e, en, other);
        assert!(
            related > unrelated + 0.1,
            "{en}/{zh}: {related} vs {other}: {unrelated}"
        );
    }
}

#[test]
fn a_model_read_from_files_embeds_as_the_bundled_one_does() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/zh-en-static");
    let from_files = Embedder::from_dir(&dir).expect("model folder loads");
    let bundled = Embedder::bundled().expect("model loads");
    assert!(from_files.has_ascii_path() && bundled.has_ascii_path());
    for text in [
        "Find the cheapest flight to Tokyo and convert the price to yen",
        "读取文件内容 and list the directory",
        "",
    ] {
        assert_eq!(from_files.embed(text), bundled.embed(text), "{text:?}");
    }
}
