//! Description templates through the surface: rendered once per session into its own view,
//! byte-identical for equal inputs, failing at the first render with the tool and the line.

use serde_json::{Value, json};
use toolshelf_core::template::{SessionValues, TemplateErrorKind};
use toolshelf_core::{Catalog, Compiled, Config, Format};

fn catalog(template: &str) -> Catalog {
    Catalog::from_value(
        &json!({
            "builtin": [
                {"name": "Read", "description": "Read a file.", "defer_loading": false,
                 "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
                 "description_template": template},
                {"name": "Grep", "description": "Search file contents."}
            ],
            "servers": [{
                "name": "git",
                "description": "Git as the server describes it.",
                "description_template": "part('Git for', session.workspace, '(' + str(len(pkg.tools)) + ' tools)')",
                "tools": [
                    {"name": "git_log", "description": "Commit logs.", "defer_loading": false},
                    {"name": "git_status", "description": "Working tree status."}
                ]
            }]
        }),
        "catalog.json",
    )
    .expect("catalog")
}

const TEMPLATE: &str = "\
description = join([
    part(pkg.description, 'Paths are relative to', tag('workspace', session.workspace) + '.'),
    render_section('Team', [pkg.team]),
    part('Mode:', session.mode) if has(session, 'mode') else None,
], sep='\\n\\n')
";

const CONFIG: &str = "\
[defer]\n\
default = true\n\
[template]\n\
workspace = \"/src/shop\"\n\
[template.vars]\n\
team = \"payments\"\n\
[tools.\"mcp__git__git_log\"]\n\
description_template = \"part(pkg.description, 'Repository:', session.workspace, 'client', session.client)\"\n\
[modes.review]\n\
tools = [\"^Read$\", \"^mcp__git__\"]\n\
";

fn session(client: &str) -> SessionValues {
    SessionValues {
        mode: Some("review".into()),
        client: Some(client.into()),
        workspace: Some("/src/shop".into()),
    }
}

fn compiled(config: &str, mode: Option<&str>) -> Compiled {
    Compiled::new(
        Config::from_toml_str(config, "t.toml").expect("config"),
        "t.toml",
        mode,
    )
    .expect("compiles")
}

fn rendered(catalog: &Catalog, config: &str, s: &SessionValues) -> String {
    let c = compiled(config, Some("review"));
    let surface = c
        .session_surface(catalog, &c.expose(catalog), s)
        .expect("renders");
    serde_json::to_string_pretty(&surface.tools(catalog, Format::Anthropic)).expect("json")
}

#[test]
fn a_rendered_surface_with_templates() {
    let c = catalog(TEMPLATE);
    insta::assert_snapshot!(rendered(&c, CONFIG, &session("claude-code")));
}

#[test]
fn two_sessions_with_equal_inputs_give_equal_bytes() {
    // Separate catalogs and compilations, as two sessions (or two processes) would have.
    let a = rendered(&catalog(TEMPLATE), CONFIG, &session("claude-code"));
    let b = rendered(&catalog(TEMPLATE), CONFIG, &session("claude-code"));
    assert_eq!(a, b);
    // A session value is an input: another client renders its own bytes.
    let other = rendered(&catalog(TEMPLATE), CONFIG, &session("cursor"));
    assert_ne!(a, other);
    assert!(other.contains("client cursor"), "{other}");
}

#[test]
fn the_catalog_keeps_its_own_descriptions() {
    let c = catalog(TEMPLATE);
    let cc = compiled(CONFIG, Some("review"));
    let exposure = cc.expose(&c);
    let surface = cc
        .session_surface(&c, &exposure, &session("claude-code"))
        .expect("renders");
    let read = c.position("Read").expect("Read");
    assert_eq!(c.tools()[read].description, "Read a file.");
    assert!(
        surface
            .description(&c, read)
            .contains("<workspace>/src/shop</workspace>")
    );
    // The plain surface (no session) shows the catalog's descriptions.
    let plain = cc.surface(&c, &exposure).tools(&c, Format::Anthropic);
    assert_eq!(plain[0]["description"], "Read a file.");
    // The group header in the index is the rendered one.
    let index = surface.index.expect("something is deferred").text;
    assert!(
        index.contains("mcp__git: Git for /src/shop (2 tools)"),
        "{index}"
    );
}

#[test]
fn a_forbidden_read_fails_at_the_first_render_naming_the_tool_and_the_line() {
    let c = catalog("a = pkg.description\nb = 'turn ' + str(turn.number)\na + b");
    let cc = compiled(CONFIG, Some("review"));
    let e = cc
        .session_surface(&c, &cc.expose(&c), &session("x"))
        .expect_err("forbidden");
    assert_eq!(e.kind, TemplateErrorKind::Turn("number".into()));
    assert_eq!(e.line, Some(2));
    assert!(
        e.to_string()
            .starts_with("tool \"Read\": description template line 2: reads turn.number"),
        "{e}"
    );
}

#[test]
fn every_stub_fails_the_render_of_a_surface() {
    for stub in toolshelf_core::template::STUBS {
        let c = catalog(&format!("x = 1\n{stub}()"));
        let cc = compiled(CONFIG, Some("review"));
        let e = cc
            .session_surface(&c, &cc.expose(&c), &session("x"))
            .expect_err(stub);
        assert_eq!(e.kind, TemplateErrorKind::Stub(stub.into()));
        assert_eq!(e.line, Some(2));
        assert!(e.to_string().contains("tool \"Read\""), "{e}");
    }
}

#[test]
fn a_hidden_tool_is_not_rendered() {
    // Grep is outside the mode: its failing template never runs.
    let c = Catalog::from_value(
        &json!([
            {"name": "Read", "description": "r", "defer_loading": false},
            {"name": "Grep", "description": "g", "description_template": "turn.number"}
        ]),
        "c.json",
    )
    .expect("catalog");
    let cc = compiled(CONFIG, Some("review"));
    let s = cc
        .session_surface(&c, &cc.expose(&c), &session("x"))
        .expect("hidden tools are not rendered");
    assert!(s.descriptions().tools.is_empty());
    let none = compiled(CONFIG, None);
    assert!(
        none.session_surface(&c, &none.expose(&c), &session("x"))
            .is_err(),
        "visible again without the mode, and so rendered"
    );
}

#[test]
fn configuration_templates_are_checked_when_compiled() {
    for (toml, says) in [
        (
            "[tools.x]\ndescription_template = \"part(\"",
            "[tools.\"x\"]: description template line 1, column 6: does not parse",
        ),
        (
            "[template.vars]\nname = 1",
            "is a value the catalog fills in",
        ),
        (
            "[template.vars]\n\"a-b\" = 1",
            "is not a name a template can read",
        ),
        ("[tools.x]\nscript = \" \"", "[tools.\"x\"] script is empty"),
        (
            "[tools.x]\nscript = \"x.star\"\ndescription_template = \"'y'\"",
            "script and description_template are both set",
        ),
        (
            "[scripts]\nmax_steps = 0",
            "[scripts] max_steps must be at least 1 (got 0)",
        ),
    ] {
        let e = Compiled::new(
            Config::from_toml_str(toml, "t.toml").expect("parses"),
            "t.toml",
            None,
        )
        .expect_err(toml)
        .to_string();
        assert!(e.contains(says), "{toml}: {e}");
    }
}

#[test]
fn a_tools_section_that_names_no_tool_is_reported() {
    let c = catalog("'x'");
    let cc = compiled(
        "[tools.nope]\ndescription_template = \"'y'\"\n[tools.Read]\ndescription_template = \"'z'\"",
        None,
    );
    assert_eq!(
        cc.unmatched(&c),
        ["[tools.\"nope\"] matches no tool; its description_template is not used"]
    );
    // A section for a tool of a server that is not running may name one of its unknown tools.
    let down = compiled(
        "[tools.mcp__db__query]\ndescription_template = \"'y'\"",
        None,
    );
    let bare = compiled("[tools.query]\ndescription_template = \"'y'\"", None);
    assert_eq!(
        bare.unmatched_while_down(&c, &["db".to_owned()]),
        [
            "[tools.\"query\"] matches no tool (it may name a tool of server \"db\", which is not running); its description_template is not used"
        ]
    );
    assert_eq!(
        down.unmatched_while_down(&c, &["db".to_owned()]),
        [
            "[tools.\"mcp__db__query\"] matches no tool (it may name a tool of server \"db\", which is not running); its description_template is not used"
        ]
    );
    // The configuration's template stands in for the catalog's.
    let s = cc
        .session_surface(&c, &cc.expose(&c), &SessionValues::default())
        .expect("renders");
    let read = c.position("Read").expect("Read");
    assert_eq!(s.description(&c, read), "z");
    let v: Value = s.definition(&c, read, Format::Mcp);
    assert_eq!(v["description"], "z");
}

#[test]
fn two_sections_naming_one_tool_apply_the_exact_name_and_warn() {
    let c = catalog("'x'");
    // The bare name sorts first, so name order alone would pick it.
    let cc = compiled(
        "[tools.git_log]\ndescription_template = \"'bare'\"\n\
         [tools.\"mcp__git__git_log\"]\ndescription_template = \"'canonical'\"",
        None,
    );
    assert_eq!(
        cc.unmatched(&c),
        [
            "[tools.\"git_log\"] also names \"mcp__git__git_log\" as [tools.\"mcp__git__git_log\"] does; the description_template of [tools.\"mcp__git__git_log\"] applies"
        ]
    );
    let s = cc
        .session_surface(&c, &cc.expose(&c), &SessionValues::default())
        .expect("renders");
    let log = c.position("mcp__git__git_log").expect("git_log");
    assert_eq!(s.description(&c, log), "canonical");
}
