//! `toolshelf check-template`: a description template checked and rendered against sample values,
//! for template authors and CI.
//!
//! Every access a render would refuse is found in the source, each with its line, including
//! those on paths the sample values do not take; then the template is rendered once, as a session
//! would render it. A script tool's file whose top-level `def run` cannot take the params is
//! refused as its definition would be. A finding or a failed render is exit status 1.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Result, bail};
use serde_json::{Value, json};
use toolshelf_core::Config;
use toolshelf_core::search::render::plain_quote;
use toolshelf_core::template::{self, SessionValues};

use super::{outln, print_json};

/// Arguments of `check-template`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The template (Starlark source).
    file: PathBuf,
    /// Sample values: a JSON object `{"pkg": {...}, "session": {"mode", "client", "workspace"}}`,
    /// inline or in a file. `pkg` is added to the sample catalog values (name, tool, server,
    /// description, params, required, tags, tools).
    #[arg(long, value_name = "JSON|FILE")]
    vars: Option<String>,
    /// One package value, NAME=VALUE (VALUE read as JSON when it is JSON, else as a string);
    /// repeatable, applied after --vars.
    #[arg(long = "pkg", value_name = "NAME=VALUE")]
    pkg: Vec<String>,
    /// A configuration whose [template.vars] and [template] workspace are used.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// session.mode.
    #[arg(long, value_name = "NAME")]
    mode: Option<String>,
    /// session.client.
    #[arg(long, value_name = "NAME")]
    client: Option<String>,
    /// session.workspace. Default: the --config's [template] workspace, else the current
    /// directory, as in a session.
    #[arg(long, value_name = "TEXT")]
    workspace: Option<String>,
    /// Print {"file", "ok", "findings": [{"line", "kind", "access", "message"}], "rendered",
    /// "error"} instead of text.
    #[arg(long)]
    json: bool,
}

/// The catalog's values as a sample tool (and group) would give them.
fn sample_pkg() -> BTreeMap<String, Value> {
    BTreeMap::from([
        ("description".to_owned(), json!("An example tool.")),
        ("name".to_owned(), json!("mcp__example__example_tool")),
        ("params".to_owned(), json!(["path"])),
        ("required".to_owned(), json!(["path"])),
        ("server".to_owned(), json!("example")),
        ("tags".to_owned(), json!([])),
        ("tool".to_owned(), json!("example_tool")),
        ("tools".to_owned(), json!(["example_tool"])),
    ])
}

fn string_of(v: Option<&Value>, key: &str) -> Result<Option<String>> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => bail!("--vars: session.{key} must be a string or null, found {other}"),
    }
}

/// Runs the check; `Ok(false)` when anything was found or the render failed.
pub fn run(args: Args) -> Result<bool> {
    let source = crate::inputs::read_text(&args.file, "template")?;
    let owner = args.file.display().to_string();
    let mut pkg = sample_pkg();
    // As a session would have it: [template] workspace, else the directory toolshelf runs in.
    let mut configured = None;
    if let Some(path) = &args.config {
        let text = crate::inputs::read_text(path, "config")?;
        let config = Config::from_toml_str(&text, &path.display().to_string())?;
        // The values the gateway would refuse are refused here too.
        toolshelf_core::template::Templates::new(&config)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        // A --mode the configuration does not define is refused, as every command refuses it.
        if let Some(mode) = &args.mode
            && !config.modes.contains_key(mode)
        {
            let unknown = toolshelf_core::Error::UnknownMode {
                name: mode.clone(),
                available: config.modes.keys().cloned().collect(),
            };
            bail!("{}: {unknown}", path.display());
        }
        pkg.extend(config.template.vars);
        configured = config.template.workspace;
    }
    let mut session = SessionValues {
        workspace: toolshelf_runtime::files::workspace(configured.as_deref()),
        ..SessionValues::default()
    };
    if let Some(vars) = &args.vars {
        // Inline JSON, or a file. Text that opens with `{` is inline; so is text that opens as
        // other JSON does (`[`, `"`) or is other JSON (`5`, `null`) and names no file (a file
        // `[team].json` is read), so that it gets the JSON's error rather than "no such file".
        let trimmed = vars.trim_start();
        let inline = trimmed.starts_with('{')
            || (!std::path::Path::new(vars).is_file()
                && (trimmed.starts_with(['[', '"']) || toolshelf_core::json::parse(vars).is_ok()));
        let (text, from) = if inline {
            (vars.clone(), "--vars".to_owned())
        } else {
            (
                crate::inputs::read_text(std::path::Path::new(vars), "--vars file")?,
                format!("--vars file {vars}"),
            )
        };
        // As strict as a catalog: an object that gives a key twice is refused, not read as its
        // last value.
        let v: Value = toolshelf_core::json::parse(&text).map_err(|e| {
            anyhow::anyhow!(
                "{from} is not valid JSON: {}",
                toolshelf_core::json::in_words(&e, &text, false)
            )
        })?;
        let Value::Object(top) = v else {
            bail!(
                "{from} must be a JSON object {{\"pkg\": {{...}}, \"session\": {{...}}}}, found {}",
                toolshelf_core::catalog::kind_of(&v)
            );
        };
        for key in top.keys() {
            if key != "pkg" && key != "session" {
                bail!(
                    "--vars: unknown key {} (expected \"pkg\" and \"session\")",
                    plain_quote(key)
                );
            }
        }
        match top.get("pkg") {
            None | Some(Value::Null) => {}
            Some(Value::Object(p)) => pkg.extend(p.iter().map(|(k, v)| (k.clone(), v.clone()))),
            Some(other) => bail!("--vars: pkg must be an object, found {other}"),
        }
        match top.get("session") {
            None | Some(Value::Null) => {}
            Some(Value::Object(s)) => {
                for key in s.keys() {
                    if !matches!(key.as_str(), "mode" | "client" | "workspace") {
                        bail!(
                            "--vars: session.{key} is not a session value (mode, client, workspace)"
                        );
                    }
                }
                session.mode = string_of(s.get("mode"), "mode")?;
                session.client = string_of(s.get("client"), "client")?;
                if s.contains_key("workspace") {
                    session.workspace = string_of(s.get("workspace"), "workspace")?;
                }
            }
            Some(other) => bail!("--vars: session must be an object, found {other}"),
        }
    }
    for p in &args.pkg {
        let Some((name, value)) = p.split_once('=') else {
            bail!("--pkg {}: expected NAME=VALUE", plain_quote(p));
        };
        if name.trim().is_empty() {
            bail!(
                "--pkg {}: the NAME before `=` is empty; expected NAME=VALUE",
                plain_quote(p)
            );
        }
        // Text that is not JSON is a string; JSON that gives a key twice is refused.
        let value = match toolshelf_core::json::parse(value) {
            Ok(v) => v,
            Err(e) if e.is_data() => bail!(
                "--pkg {}: {}",
                plain_quote(p),
                toolshelf_core::json::in_words(&e, value, true)
            ),
            Err(_) => Value::String(value.to_owned()),
        };
        pkg.insert(name.to_owned(), value);
    }
    if args.mode.is_some() {
        session.mode = args.mode.clone();
    }
    if args.client.is_some() {
        session.client = args.client.clone();
    }
    if args.workspace.is_some() {
        session.workspace = args.workspace.clone();
    }

    let (findings, rendered) = match template::findings(&source, &owner, &pkg, &session) {
        // A script tool's file is defined as the scripts server defines it: its `description`,
        // `schema` and `run` are checked as there, and so is the schema as a JSON Schema.
        Ok(f) if template::defines_function(&source, "run", 1) => (
            f,
            template::script_file_definition(&source, &owner, &pkg, &session)
                .map_err(|e| e.to_string())
                .and_then(|d| match toolshelf_core::invoke::schema_problem(&d.schema) {
                    Some(p) => Err(format!(
                        "{owner}: script: `schema` is not a valid JSON Schema ({p}); fix `schema` in the file"
                    )),
                    None => Ok(d.description),
                }),
        ),
        // A script tool's `run` that cannot take the params fails its definition, whatever the
        // render gives.
        Ok(f) => (
            f,
            template::render(&source, &owner, &pkg, &session)
                .and_then(|text| match template::run_refusal(&source, &owner) {
                    Some(e) => Err(e),
                    None => Ok(text),
                })
                .map_err(|e| e.to_string()),
        ),
        // Does not parse: nothing to look through or render.
        Err(e) => (Vec::new(), Err(e.to_string())),
    };
    let ok = findings.is_empty() && rendered.is_ok();
    if args.json {
        print_json(&json!({
            "file": owner,
            "ok": ok,
            "findings": findings,
            "rendered": rendered.as_ref().ok(),
            "error": rendered.as_ref().err(),
        }))?;
        return Ok(ok);
    }
    for f in &findings {
        outln!("{}", f.message);
    }
    match &rendered {
        Ok(text) => {
            if findings.is_empty() {
                outln!("{owner}: ok; renders to:");
            } else {
                outln!(
                    "{owner}: {}; with these sample values it renders to:",
                    super::count(findings.len(), "refused access", "refused accesses")
                );
            }
            // Line by line as it renders, its other control and invisible characters escaped:
            // a template must not move the cursor or hide text on the terminal that checks it.
            let shown: Vec<String> = text.split('\n').map(super::cell).collect();
            outln!("{}", shown.join("\n"));
        }
        // A failure already listed as a finding is not said twice.
        Err(e) if findings.iter().any(|f| &f.message == e) => {
            outln!(
                "{owner}: {}",
                super::count(findings.len(), "refused access", "refused accesses")
            );
        }
        Err(e) => outln!("{e}"),
    }
    Ok(ok)
}
