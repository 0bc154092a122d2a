//! The bundled gateway configuration's permission rules hold on the paths a model sends: users
//! copy it as their policy, and its filesystem server is rooted at the directory it starts in, so
//! relative paths are the natural ones.

use serde_json::{Map, Value, json};
use toolshelf_core::config::Action;
use toolshelf_core::{Catalog, Compiled, Config};

const CATALOG: &str = include_str!("../../../examples/catalog.json");
const GATEWAY: &str = include_str!("../../../examples/gateway.toml");

fn action(compiled: &Compiled, catalog: &Catalog, tool: &str, params: Value) -> Action {
    let i = catalog.position(tool).expect(tool);
    let params: Map<String, Value> = serde_json::from_value(params).expect("object");
    compiled
        .permissions()
        .check(&catalog.tools()[i], &params)
        .action
}

#[test]
fn nothing_inside_git_directories_is_reachable_by_any_spelling_of_its_path() {
    let catalog = Catalog::from_json_str(CATALOG, "catalog.json").expect("example catalog");
    let config = Config::from_toml_str(GATEWAY, "gateway.toml").expect("example gateway config");
    let compiled = Compiled::new(config, "gateway.toml", None).expect("compiles");
    let read = "mcp__filesystem__read_text_file";
    for path in [
        ".git/config",
        "./.git/config",
        ".git/HEAD",
        "src/../.git/config",
        "/work/repo/.git/config",
        "//work/repo/.git/config",
        "/work/repo/sub/../.git/objects/ab/cdef",
    ] {
        assert_eq!(
            action(&compiled, &catalog, read, json!({"path": path})),
            Action::Deny,
            "{path}"
        );
    }
    for path in [".git", "./.git", "/work/repo/.git"] {
        assert_eq!(
            action(
                &compiled,
                &catalog,
                "mcp__filesystem__list_directory",
                json!({"path": path})
            ),
            Action::Deny,
            "{path}"
        );
    }
    for path in [
        "a.txt",
        "src/main.rs",
        ".gitignore",
        "/work/repo/.github/x.yml",
    ] {
        assert_eq!(
            action(&compiled, &catalog, read, json!({"path": path})),
            Action::Allow,
            "{path}"
        );
    }
}
