//! Loading the inputs every command shares: catalog, configuration and mode.
//!
//! With neither `--catalog` nor `--config`, commands run on the bundled example (a catalog captured
//! from real MCP servers and its example configuration), so `toolshelf ledger` shows something
//! real with no set-up. A `--catalog` without `--config` uses the built-in defaults.

use std::path::PathBuf;

use anyhow::Result;
use toolshelf_core::template::SessionValues;
use toolshelf_core::{Catalog, Compiled, Config, Exposure, Surface};

use crate::commands::errln;

/// The bundled example catalog (see `examples/` and `scripts/capture-example-catalog.sh`).
pub const EXAMPLE_CATALOG: &str = include_str!("../../../examples/catalog.json");
/// The bundled example configuration.
pub const EXAMPLE_CONFIG: &str = include_str!("../../../examples/toolshelf.toml");

/// `--catalog`, `--config`, `--mode`.
#[derive(Debug, Clone, clap::Args)]
pub struct Source {
    /// Tool catalog (JSON): Anthropic, OpenAI, MCP or bare tool arrays, an MCP tools/list result,
    /// or toolshelf's grouped form. Default: the bundled example.
    #[arg(long, value_name = "FILE")]
    pub catalog: Option<PathBuf>,
    /// Configuration (TOML). Default: the bundled example's when no --catalog is given, else none.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Active mode, as defined by [modes.NAME] in the configuration.
    #[arg(long, value_name = "NAME")]
    pub mode: Option<String>,
    /// The client's name, as description templates read it (session.client). Default: none.
    #[arg(long, value_name = "NAME")]
    pub client: Option<String>,
    /// The workspace, as description templates read it (session.workspace). Default:
    /// [template] workspace, else the current directory.
    #[arg(long, value_name = "TEXT")]
    pub workspace: Option<String>,
}

/// The keys a command's JSON finding carries besides those of the finding itself.
pub type JsonFields = serde_json::Map<String, serde_json::Value>;

/// Everything computed from the inputs.
#[derive(Debug)]
pub struct Loaded {
    pub catalog: Catalog,
    pub compiled: Compiled,
    pub exposure: Exposure,
    pub surface: Surface,
}

/// Why a file could not be read, in plain words: no OS error numbers.
pub fn io_problem(e: &std::io::Error) -> String {
    use std::io::ErrorKind;
    match e.kind() {
        ErrorKind::NotFound => "there is no such file".to_owned(),
        ErrorKind::PermissionDenied => "permission denied".to_owned(),
        ErrorKind::IsADirectory => "it is a directory, not a file".to_owned(),
        _ => {
            let text = e.to_string();
            match text.rfind(" (os error ") {
                Some(at) if text.ends_with(')') => text[..at].to_owned(),
                _ => text,
            }
        }
    }
}

/// The error for a file of `what` that is not UTF-8 at byte `offset`, on line `line`.
fn not_utf8(shown: &str, line: usize, offset: usize, what: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "{shown}:{line}: not valid UTF-8 (byte {offset} of the file); the {what} must be UTF-8 text"
    )
}

/// A file's text, without the byte-order mark some editors write first. `what` names the file
/// in errors (`catalog`, `config`): a file that cannot be read, a directory, and bytes that are
/// not UTF-8 (with their line and byte offset) are each said in plain words.
pub fn read_text(path: &std::path::Path, what: &str) -> Result<String> {
    let shown = path.display();
    let bytes = std::fs::read(path)
        .map_err(|e| anyhow::anyhow!("cannot read {what} {shown}: {}", io_problem(&e)))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        let valid = e.utf8_error().valid_up_to();
        let line = e.as_bytes()[..valid]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1;
        not_utf8(&shown.to_string(), line, valid, what)
    })?;
    Ok(match text.strip_prefix('\u{feff}') {
        Some(rest) => rest.to_owned(),
        None => text,
    })
}

/// How messages name an input path: `stdin` for `-`, else the path.
pub fn shown(path: &std::path::Path) -> String {
    if path.as_os_str() == "-" {
        "stdin".into()
    } else {
        path.display().to_string()
    }
}

/// The non-blank lines of a JSON-lines file (`what` names it in errors), each with its number
/// from 1, read one at a time: a leading byte-order mark is skipped, and a line that is not UTF-8
/// is an error naming the file, the line and the byte offset. A directory, or a file that fails
/// to read for any other reason, is an error naming the file alone: no line is at fault. The path
/// `-` reads standard input, named `stdin` in messages.
pub fn lines_of(
    path: &std::path::Path,
    what: &str,
) -> Result<impl Iterator<Item = Result<(usize, String)>>> {
    use std::io::BufRead as _;
    let shown = shown(path);
    let mut reader: Box<dyn std::io::BufRead> = if path.as_os_str() == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        let file = std::fs::File::open(path).map_err(|e| {
            anyhow::anyhow!("cannot read {what} {}: {}", path.display(), io_problem(&e))
        })?;
        // Opening a directory succeeds; reading it fails, at what would be its first line.
        if file.metadata().is_ok_and(|m| m.is_dir()) {
            anyhow::bail!(
                "cannot read {what} {}: it is a directory, not a JSON-lines file",
                path.display()
            );
        }
        Box::new(std::io::BufReader::new(file))
    };
    let what = what.to_owned();
    let mut n = 0usize;
    // Byte offset of the next line's start in the file.
    let mut offset = 0usize;
    let mut failed = false;
    Ok(std::iter::from_fn(move || {
        loop {
            if failed {
                return None;
            }
            let mut raw = Vec::new();
            match reader.read_until(b'\n', &mut raw) {
                Ok(0) => return None,
                Ok(_) => {}
                Err(e) => {
                    failed = true;
                    return Some(Err(anyhow::anyhow!(
                        "cannot read {what} {shown}: {}",
                        io_problem(&e)
                    )));
                }
            }
            n += 1;
            let start = offset;
            offset += raw.len();
            if raw.last() == Some(&b'\n') {
                raw.pop();
                if raw.last() == Some(&b'\r') {
                    raw.pop();
                }
            }
            let line = match String::from_utf8(raw) {
                Ok(l) => l,
                Err(e) => {
                    // Not UTF-8: the line's own bytes are at fault.
                    failed = true;
                    let valid = e.utf8_error().valid_up_to();
                    return Some(Err(not_utf8(&shown, n, start + valid, &what)));
                }
            };
            let line = match (n, line.strip_prefix('\u{feff}')) {
                (1, Some(rest)) => rest.to_owned(),
                _ => line,
            };
            if !line.trim().is_empty() {
                return Some(Ok((n, line)));
            }
        }
    }))
}

/// One line of a JSON-lines file, read as strictly as a catalog
/// ([`toolshelf_core::json::parse`]): an object that gives a key twice is refused rather than
/// keeping its last value. `at` is the line's place (`FILE:LINE`); `not` says what text that is
/// not JSON fails to be (`"not valid JSON"`), ahead of the parser's own message.
pub fn json_line(line: &str, at: &str, not: &str) -> Result<serde_json::Value> {
    toolshelf_core::json::parse(line).map_err(|e| line_error(&e, line, at, not))
}

/// The error of a strict parse of `line` at `at`, with the column it is at (the parser's "line
/// 1" would be the line's own, not the file's): a duplicate key as itself, a syntax error in
/// plain words after `at: not`.
fn line_error(e: &serde_json::Error, line: &str, at: &str, not: &str) -> anyhow::Error {
    let words = toolshelf_core::json::in_words(e, line, true);
    if e.is_data() {
        anyhow::anyhow!("{at}: {words}")
    } else {
        anyhow::anyhow!("{at}: {not}: {words}")
    }
}

/// A JSON line's value as a message names it: a scalar as its JSON text (cut when long), an
/// array or an object by its kind.
pub fn value_shown(v: &serde_json::Value) -> String {
    use serde_json::Value;
    match v {
        Value::Array(_) | Value::Object(_) => toolshelf_core::catalog::kind_of(v).to_owned(),
        _ => toolshelf_core::echo::for_log(&v.to_string(), 60),
    }
}

/// The object a JSON line at `at` holds, or an error saying what it holds instead; `shape` shows
/// the object expected (`{"query": "..."}`).
pub fn line_object<'v>(
    v: &'v serde_json::Value,
    at: &str,
    shape: &str,
) -> Result<&'v serde_json::Map<String, serde_json::Value>> {
    v.as_object().ok_or_else(|| {
        anyhow::anyhow!(
            "{at}: the line is {}, not an object such as {shape}",
            value_shown(v)
        )
    })
}

/// Refuses a key of `obj` that is a slip of one of `known` (the same but for case, or an edit or
/// two away, as the catalog loader judges slips), naming the key it is a slip for: its value
/// would be ignored without a word. Any other key is let be.
pub fn refuse_slips(
    obj: &serde_json::Map<String, serde_json::Value>,
    known: &[&'static str],
    at: &str,
) -> Result<()> {
    for key in obj.keys() {
        if let Some(meant) = toolshelf_core::catalog::near_miss(key, known, &[]) {
            anyhow::bail!(
                "{at}: unknown key {}; did you mean {meant:?}? (a misspelt key would be ignored)",
                toolshelf_core::echo::for_log(&format!("{key:?}"), 60)
            );
        }
    }
    Ok(())
}

/// `catalog` (read from `text`, named `name`) with `tool_define`, as a session with
/// `[authoring] enabled = true` has it from the start: a deferred built-in among the others, so
/// the index lists it, rules and `[tools.tool_define]` match it, and the bytes are those a session
/// is sent. A built-in of the catalog's own with that name keeps it, as the client's tool hides
/// the proxy's, and is warned about.
fn with_tool_define(catalog: Catalog, text: &str, name: &str) -> Catalog {
    use toolshelf_core::authoring::{TOOL_DEFINE, tool_define_item};
    let own = catalog
        .tools()
        .iter()
        .any(|t| t.original_server.is_none() && t.original_name == TOOL_DEFINE);
    let added = if own {
        Err(format!(
            "{name} has a built-in tool named {TOOL_DEFINE:?} of its own, which hides the one [authoring] adds"
        ))
    } else {
        Catalog::from_json_str_adding(text, name, &[tool_define_item()], "[authoring]")
            .map_err(|e| e.to_string())
    };
    match added {
        Ok(c) => c,
        Err(e) => {
            errln!("toolshelf: warning: {TOOL_DEFINE} is not offered: {e}");
            catalog
        }
    }
}

/// Warnings of one kind printed before the rest are counted; `-v` prints every one.
pub const WARNINGS_SHOWN: usize = 5;

/// Prints one kind of warning: all of them, or the first [`WARNINGS_SHOWN`] and a count, so a
/// catalog with many duplicate names does not bury the other kinds (each kind is cut on its own).
fn print_warnings(warnings: &[String], all: bool) {
    let shown = if all { warnings.len() } else { WARNINGS_SHOWN };
    for w in warnings.iter().take(shown) {
        errln!("toolshelf: warning: {w}");
    }
    if warnings.len() > shown {
        errln!(
            "toolshelf: warning: ... and {} more like these ({} in all; -v prints every one)",
            warnings.len() - shown,
            warnings.len()
        );
    }
}

impl Source {
    /// With a `--config` that fronts servers or defines script tools but no `--catalog`, the
    /// catalog is the bundled example's, not the gateway's: what to run for the gateway's own.
    fn example_catalog_note(&self, config: &Config) -> Option<String> {
        let path = self.config.as_ref().filter(|_| self.catalog.is_none())?;
        let servers = !config.servers.is_empty();
        let scripts = config.tools.values().any(|t| t.script.is_some());
        let whose = match (servers, scripts) {
            (true, true) => "the servers and script tools",
            (true, false) => "the servers",
            (false, true) => "the script tools",
            (false, false) => return None,
        };
        Some(format!(
            "the tools are the bundled example catalog's, not {whose} of {0}; for theirs run \
`toolshelf catalog --config {0} --all > c.json`, then give --catalog c.json",
            path.display()
        ))
    }

    /// Loads and decides everything; prints catalog, policy and schema warnings to stderr, each
    /// kind cut to [`WARNINGS_SHOWN`] lines unless `-v` was given.
    pub fn load(&self) -> Result<Loaded> {
        self.load_reporting(None, None)
    }

    /// [`Source::load`] for a command run with `--json`: a finding of the load (a description
    /// template that reads a per-turn value, uses a stub or names a `pkg` or `session` value
    /// that is not there, exit status 1) is printed on stdout
    /// too, as `fields` (what the command's own findings carry, such as explain's `name`) with
    /// `"error": "template"`, the template's `owner` and `line` and the `message` added. With
    /// `None`, as [`Source::load`].
    pub fn load_json(&self, json: bool, fields: JsonFields) -> Result<Loaded> {
        self.load_reporting(json.then_some(fields), None)
    }

    /// [`Source::load_json`] with the context window set to `window` (when given) in place of
    /// `[defer] window`, before anything is decided: `auto:N` deferral is measured against it.
    pub fn load_json_with_window(
        &self,
        json: bool,
        fields: JsonFields,
        window: Option<u64>,
    ) -> Result<Loaded> {
        self.load_reporting(json.then_some(fields), window)
    }

    fn load_reporting(&self, json: Option<JsonFields>, window: Option<u64>) -> Result<Loaded> {
        let (catalog_text, catalog_name): (std::borrow::Cow<str>, String) = match &self.catalog {
            Some(p) => (read_text(p, "catalog")?.into(), p.display().to_string()),
            None => (
                EXAMPLE_CATALOG.into(),
                "examples/catalog.json (bundled)".into(),
            ),
        };
        let catalog = Catalog::from_json_str(&catalog_text, &catalog_name)?;
        let mut config = match (&self.config, &self.catalog) {
            (Some(p), _) => {
                Config::from_toml_str(&read_text(p, "config")?, &p.display().to_string())?
            }
            (None, None) => {
                Config::from_toml_str(EXAMPLE_CONFIG, "examples/toolshelf.toml (bundled)")?
            }
            (None, Some(_)) => Config::default(),
        };
        if let Some(window) = window {
            config.defer.window = window;
        }
        let config_name = match (&self.config, &self.catalog) {
            (Some(p), _) => p.display().to_string(),
            (None, None) => "examples/toolshelf.toml (bundled)".into(),
            (None, Some(_)) => "the default configuration".into(),
        };
        // One exposure decision for every command, the same the gateway makes.
        let compiled = Compiled::new(config, &config_name, self.mode.as_deref())?;
        if let Some(note) = self.example_catalog_note(compiled.config()) {
            errln!("toolshelf: note: {note}");
        }
        let catalog = if compiled.config().authoring.enabled {
            with_tool_define(catalog, &catalog_text, &catalog_name)
        } else {
            catalog
        };
        let exposure = compiled.expose(&catalog);
        let session = SessionValues {
            mode: self.mode.clone(),
            client: self.client.clone(),
            workspace: self
                .workspace
                .clone()
                .or_else(|| toolshelf_runtime::files::workspace(compiled.templates().workspace())),
        };
        // A template that reads a per-turn value, a stub or a `pkg` or `session` value that is
        // not there is a finding (exit 1), as `check-template` reports it; any other failure
        // keeps the command from running.
        let surface = match compiled.session_surface(&catalog, &exposure, &session) {
            Ok(surface) => surface,
            Err(e) if e.is_refused_access() => {
                if let Some(mut fields) = json {
                    fields.insert("error".into(), "template".into());
                    fields.insert("owner".into(), e.owner.clone().into());
                    fields.insert("line".into(), e.line.into());
                    fields.insert("message".into(), e.to_string().into());
                    crate::commands::print_json(&fields)?;
                }
                return Err(crate::commands::Finding(e.to_string()).into());
            }
            Err(e) => return Err(e.into()),
        };
        let all = crate::commands::serve::verbosity() > 0;
        let [unread, left_out, renamed] = catalog.warnings_by_kind();
        for kind in [
            unread,
            left_out,
            renamed,
            &exposure.warnings,
            &compiled.unmatched(&catalog),
            &toolshelf_core::invoke::schema_warnings(&catalog),
        ] {
            print_warnings(kind, all);
        }
        Ok(Loaded {
            catalog,
            compiled,
            exposure,
            surface,
        })
    }
}

impl Loaded {
    /// The configuration as written.
    pub fn config(&self) -> &Config {
        self.compiled.config()
    }

    /// Warns on stderr when the index is over budget (the built-in names alone, or they and the
    /// line that stands for the dropped groups) or dropped groups (naming the first
    /// [`WARNINGS_SHOWN`] unless `-v` was given).
    pub fn warn_index(&self) {
        if let Some(idx) = &self.surface.index {
            if let Some(warning) = idx.budget_warning() {
                errln!("toolshelf: warning: {warning}");
            }
            if !idx.dropped.is_empty() {
                // The first few by name, as the load warnings are cut, unless -v was given.
                let all = crate::commands::serve::verbosity() > 0;
                let shown = if all {
                    idx.dropped.len()
                } else {
                    WARNINGS_SHOWN
                };
                let mut names = idx.dropped.iter().take(shown).cloned().collect::<Vec<_>>();
                if idx.dropped.len() > shown {
                    names.push(format!(
                        "... and {} more (-v names every one)",
                        idx.dropped.len() - shown
                    ));
                }
                errln!(
                    "toolshelf: note: {} with {} did not fit the index budget of {} characters, so they are searchable only: {}",
                    crate::commands::count(idx.dropped.len(), "server group", "server groups"),
                    crate::commands::count(idx.dropped_tools, "tool", "tools"),
                    idx.budget,
                    names.join(", ")
                );
            }
        }
    }
}
