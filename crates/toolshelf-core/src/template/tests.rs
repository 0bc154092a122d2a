use super::*;
use serde_json::json;

fn pkg() -> BTreeMap<String, Json> {
    BTreeMap::from([
        ("name".to_owned(), json!("mcp__git__git_log")),
        (
            "description".to_owned(),
            json!("Shows the\n commit   logs."),
        ),
        ("params".to_owned(), json!(["max_count", "repo_path"])),
        ("team".to_owned(), json!("infra")),
    ])
}

fn session() -> SessionValues {
    SessionValues {
        mode: Some("review".into()),
        client: Some("claude-code".into()),
        workspace: Some("/src/shop".into()),
    }
}

fn run(source: &str) -> Result<String, TemplateError> {
    render(source, "tool \"t\"", &pkg(), &session())
}

#[test]
fn the_value_is_the_last_expression_or_the_description_assignment() {
    assert_eq!(run("'a' + 'b'").expect("renders"), "ab");
    assert_eq!(
        run("description = 'x'\nlen('abc')").expect("renders"),
        "x",
        "an assigned description stands for the last expression"
    );
    let e = run("x = 1").expect_err("no value");
    assert_eq!(e.kind, TemplateErrorKind::NoValue);
    let e = run("[1]").expect_err("a list");
    assert_eq!(e.kind, TemplateErrorKind::NotText("list".into()));
}

#[test]
fn builtins_do_what_the_module_docs_say() {
    assert_eq!(
        run("part(pkg.description, None, '', 3, True)").expect("part"),
        "Shows the commit logs. 3 True"
    );
    assert_eq!(
        run("part('a', raw('b\\n c'), sep='|')").expect("part raw"),
        "a|b\n c"
    );
    assert_eq!(
        run("join(['a', None, '', ' b '], sep=',')").expect("join"),
        "a, b "
    );
    assert_eq!(
        run("tag('ws', session.workspace, z=1, a='x\"<y', skip=None)").expect("tag"),
        "<ws a=\"x&quot;&lt;y\" z=\"1\">/src/shop</ws>"
    );
    assert_eq!(run("tag('empty')").expect("tag"), "<empty/>");
    assert_eq!(
        run("tag('note', 'a </note> b')").expect("defused"),
        "<note>a ‹/note> b</note>"
    );
    assert_eq!(
        run("tag('outer', tag('inner', 'x'))").expect("nested"),
        "<outer><inner>x</inner></outer>"
    );
    assert_eq!(
        run("render_section('Parameters', pkg.params)").expect("section"),
        "Parameters:\n- max_count\n- repo_path"
    );
    assert_eq!(run("render_section('Empty', [])").expect("empty"), "");
    assert_eq!(
        run("render_section('Note', '  text  ')").expect("text body"),
        "Note:\ntext"
    );
    assert_eq!(
        run("str([has(pkg, 'team'), has(pkg, 'nope'), has(session, 'client'), has(turn, 'number'), has({'k': 1}, 'k'), has(None, 'x')])")
            .expect("has"),
        "[True, False, True, False, True, False]"
    );
    let e = run("tag('1x', 'y')").expect_err("bad tag name");
    assert!(e.to_string().contains("is not a tag name"), "{e}");
    let e = run("part([1])").expect_err("a list is not text");
    assert!(e.to_string().contains("a list is not text"), "{e}");
}

#[test]
fn a_forbidden_turn_value_fails_naming_the_value_the_tool_and_the_line() {
    for name in TURN_VALUES {
        let e = run(&format!("x = 'a'\n\ny = turn.{name}\nx")).expect_err("forbidden");
        assert_eq!(e.kind, TemplateErrorKind::Turn(name.into()));
        assert_eq!(e.line, Some(3));
        let text = e.to_string();
        assert!(
            text.starts_with("tool \"t\": description template line 3: reads turn.")
                && text.contains(&format!("turn.{name}")),
            "{text}"
        );
    }
}

#[test]
fn each_stub_fails_naming_the_builtin_the_tool_and_the_line() {
    for name in STUBS {
        for call in [format!("{name}()"), format!("{name}.now()")] {
            let e = run(&format!("a = 1\n{call}")).expect_err("stub");
            assert_eq!(e.kind, TemplateErrorKind::Stub(name.into()), "{call}");
            assert_eq!(e.line, Some(2), "{call}");
            assert!(
                e.to_string().starts_with(&format!(
                    "tool \"t\": description template line 2: uses {name},"
                )),
                "{e}"
            );
        }
    }
}

#[test]
fn a_forbidden_read_inside_a_function_names_its_own_line() {
    let e = run("def f():\n    return turn.time\n\nf()").expect_err("forbidden");
    assert_eq!(e.line, Some(2));
}

#[test]
fn unknown_values_list_what_there_is() {
    let e = run("pkg.teem").expect_err("unknown");
    assert_eq!(
        e.to_string(),
        "tool \"t\": description template line 1: pkg.teem is not a value here (pkg has: description, name, params, team)"
    );
    let e = run("session.user").expect_err("unknown");
    assert!(
        e.to_string()
            .contains("session.user is not a value here (session has: client, mode, workspace)"),
        "{e}"
    );
}

#[test]
fn left_out_core_functions_are_not_there() {
    for name in ["print", "getattr", "hasattr"] {
        let e = run(name).expect_err(name);
        assert!(matches!(e.kind, TemplateErrorKind::Failed(_)), "{e}");
    }
    // The core that is there works.
    assert_eq!(
        run("', '.join(sorted([str(x * 2) for x in range(3)]))").expect("core"),
        "0, 2, 4"
    );
}

#[test]
fn runaway_templates_hit_a_limit() {
    let e = run("def f():\n    n = 0\n    for i in range(100000000):\n        n += 1\n    return str(n)\nf()")
        .expect_err("ticks");
    assert!(matches!(e.kind, TemplateErrorKind::Limit(_)), "{e}");
    assert!(e.to_string().contains("CPU-step limit"), "{e}");
}

#[test]
fn syntax_errors_name_the_line() {
    let e = check_syntax("x = 1\ny = (\n", "tool \"t\"").expect_err("syntax");
    assert!(matches!(e.kind, TemplateErrorKind::Syntax(_)), "{e}");
    assert!(e.line.is_some(), "{e}");
}

#[test]
fn rendering_is_a_function_of_its_inputs() {
    let src =
        "d = {'b': 1, 'a': 2}\njoin([k + '=' + str(v) for k, v in d.items()] + [session.client])";
    let first = run(src).expect("renders");
    for _ in 0..5 {
        assert_eq!(run(src).expect("renders"), first);
    }
    assert_eq!(first, "b=1\na=2\nclaude-code");
}

#[test]
fn findings_list_every_refused_access_with_its_line() {
    let src = "a = pkg.team\nif session.mode == 'x':\n    b = turn.number\nc = time()\nd = pkg.nope + turn.messages\na";
    let f = findings(src, "t.star", &pkg(), &session()).expect("parses");
    let got: Vec<(usize, &str, &str)> = f
        .iter()
        .map(|f| (f.line, f.kind, f.access.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (3, "turn", "turn.number"),
            (4, "stub", "time"),
            (5, "unknown", "pkg.nope"),
            (5, "turn", "turn.messages"),
        ]
    );
    assert!(f[0].message.contains("t.star: description template line 3"));
}

#[test]
fn a_stub_name_the_template_binds_itself_is_not_a_finding() {
    for src in [
        "def label(env, time):\n    return part(env, time)\nlabel('prod', 'now')",
        "time = 'now'\ntime",
        "[random for random in ['a']][0]",
        "(lambda uuid: uuid)('x')",
    ] {
        let f = findings(src, "t.star", &pkg(), &session()).expect("parses");
        assert!(f.is_empty(), "{src}: {f:?}");
    }
    let f = findings(
        "def f():\n    return time.now()\nf()",
        "t.star",
        &pkg(),
        &session(),
    )
    .expect("parses");
    assert_eq!(f.len(), 1, "a stub read inside a function is still found");
}

#[test]
fn every_core_name_is_bound() {
    let names: Vec<&str> = globals().names().map(|n| n.as_str()).collect();
    for name in CORE.iter().chain(&BUILTINS).chain(&STUBS) {
        assert!(names.contains(name), "{name} missing from {names:?}");
    }
    assert_eq!(
        names.len(),
        CORE.len() + BUILTINS.len() + STUBS.len(),
        "{names:?}"
    );
}

/// The deepest source of each shape that the nesting bound lets through parses, runs and drops
/// on a thread with a small stack; one level more is refused as a syntax error naming its line,
/// before Starlark's recursive parser sees it.
#[test]
fn nesting_is_bounded_before_it_can_overflow_a_stack() {
    type Shape = Box<dyn Fn(usize) -> String>;
    let shapes: Vec<(&str, Shape)> = vec![
        (
            "unary minus",
            Box::new(|n| format!("x = {}1\nstr(x)", "-".repeat(n))),
        ),
        (
            "a chain of +",
            Box::new(|n| format!("x = {}\nstr(x)", vec!["1"; n + 1].join("+"))),
        ),
        (
            "brackets",
            Box::new(|n| format!("str({}1{})", "(".repeat(n), ")".repeat(n))),
        ),
        (
            "not",
            Box::new(|n| format!("str({}True)", "not ".repeat(n))),
        ),
        (
            "lists",
            Box::new(|n| format!("str({}{})", "[".repeat(n), "]".repeat(n))),
        ),
        (
            "lists alone",
            Box::new(|n| format!("{}1{}\nstr(1)", "[".repeat(n), "]".repeat(n))),
        ),
        (
            "calls",
            Box::new(|n| format!("str({}1{})", "abs(".repeat(n), ")".repeat(n))),
        ),
        (
            "a chain of -",
            Box::new(|n| format!("x = {}\nstr(x)", vec!["1"; n + 1].join("-"))),
        ),
        (
            "a chain of *",
            Box::new(|n| format!("x = {}\nstr(x)", vec!["1"; n + 1].join("*"))),
        ),
        (
            "conditionals",
            Box::new(|n| format!("str({}1)", "1 if True else ".repeat(n))),
        ),
        (
            "methods",
            Box::new(|n| format!("str(\"a\"{})", ".upper()".repeat(n))),
        ),
        (
            "lambdas",
            Box::new(|n| format!("f = {}1\nstr(f)", "lambda: ".repeat(n))),
        ),
        (
            "functions",
            Box::new(|n| {
                let mut s: String = (0..n)
                    .map(|i| format!("{}def f{i}():\n", " ".repeat(i)))
                    .collect();
                s.push_str(&" ".repeat(n));
                s.push_str("return 1\nstr(f0)");
                s
            }),
        ),
        (
            "comprehensions",
            Box::new(|n| format!("str({}1{})", "[".repeat(n), " for x in [1]]".repeat(n))),
        ),
        (
            "blocks",
            Box::new(|n| {
                let mut s = "def f():\n".to_owned();
                for i in 1..=n {
                    s.push_str(&format!("{}if True:\n", " ".repeat(i)));
                }
                s.push_str(&" ".repeat(n + 1));
                s.push_str("return 1\n    return 0\nstr(f())");
                s
            }),
        ),
        (
            "for blocks",
            Box::new(|n| {
                let mut s = "def f():\n    x = 0\n".to_owned();
                for i in 1..=n {
                    s.push_str(&format!("{}for a{i} in [1]:\n", " ".repeat(i)));
                }
                s.push_str(&" ".repeat(n + 1));
                s.push_str("x += 1\n    return x\nstr(f())");
                s
            }),
        ),
        (
            "an elif chain",
            Box::new(|n| {
                let mut s = "def f(x):\n    if x == 0:\n        return 0\n".to_owned();
                for i in 1..=n {
                    s.push_str(&format!("    elif x == {i}:\n        return {i}\n"));
                }
                s.push_str("str(f(-1))");
                s
            }),
        ),
        (
            "lambdas with parameters",
            Box::new(|n| format!("f = {}1\nstr(f)", "lambda a, b: ".repeat(n))),
        ),
        (
            "an or chain of strings",
            Box::new(|n| format!("str({}\"\")", "\"\"or".repeat(n))),
        ),
    ];
    // Release builds run in 2 MiB Tokio workers and are checked with half that; a debug
    // build's frames are several times larger.
    let stack = if cfg!(debug_assertions) {
        8 << 20
    } else {
        1 << 20
    };
    for (what, make) in &shapes {
        let deepest = (1..2 * nesting::MAX_DEPTH)
            .take_while(|&n| nesting::check(&make(n), nesting::MAX_DEPTH).is_ok())
            .last()
            .unwrap_or_else(|| panic!("{what}: one level passes"));
        let within = make(deepest);
        // On this small thread itself, not on the large one `render` starts.
        let result = std::thread::Builder::new()
            .stack_size(stack)
            .spawn(move || {
                evaluate(
                    &within,
                    "tool \"t\"",
                    globals(),
                    &pkg(),
                    &session(),
                    Limits::TEMPLATE,
                    Job::Describe,
                )
                .map(drop)
                .map_err(|e| e.to_string())
            })
            .expect("spawn")
            .join()
            .expect("no overflow");
        assert!(
            result.is_ok() || result.as_ref().is_err_and(|e| !e.contains("nests more")),
            "{what} at {deepest}: {result:?}"
        );
        let e = run(&make(deepest + 1)).expect_err(what);
        assert!(
            matches!(e.kind, TemplateErrorKind::Syntax(_)) && e.line.is_some(),
            "{what}: {e}"
        );
        assert!(
            e.to_string().contains("nests more than 200 levels deep"),
            "{what}: {e}"
        );
    }
}

/// A source past the nesting bound is parsed and run on the thread `render` and `check_syntax`
/// use without overflowing: its stack holds the deepest nesting a source of that size can have,
/// so a form the bound misses costs an error at most, not the process.
#[test]
fn the_parse_thread_holds_sources_past_the_nesting_bound() {
    let n = 4 << 10;
    for (source, gives) in [
        (format!("x = {}1\nstr(x)", "-".repeat(n)), "1"),
        (
            format!("str({}1{})", "(".repeat(n / 2), ")".repeat(n / 2)),
            "1",
        ),
        (
            format!("x = {}", "[".repeat(n)),
            "error: Parse error: unexpected new line",
        ),
        (format!("if 1:0\n{}'x'", "elif 1:0\n".repeat(n / 9)), "x"),
    ] {
        // Past the bound, straight to Starlark: parsed, run and dropped.
        let outcome = on_deep_stack(&source, "t", || {
            let evaluated = Module::with_temp_heap(|module| {
                let ast = AstModule::parse(FILE, source.clone(), &dialect())?;
                Evaluator::new(&module)
                    .eval_module(ast, globals())
                    .map(|v| v.to_str())
            });
            Ok(evaluated.unwrap_or_else(|e| e.to_string()))
        })
        .expect("runs");
        assert!(
            outcome.starts_with(gives),
            "{}",
            &outcome[..outcome.len().min(100)]
        );
        assert!(
            check_syntax(&source, "t").is_err(),
            "the bound refuses it before the parse: {}",
            &source[..40]
        );
    }
}

/// A short loop doubling a string or a list reaches gigabytes within Starlark's own 1,000-step
/// interval between heap checks; the heap is checked before every statement instead.
#[test]
fn the_heap_limit_holds_between_starlarks_own_checks() {
    for source in [
        "s = \"a\"\nfor i in range(40):\n    s = s + s\ns",
        "l = [1]\nfor i in range(40):\n    l = l + l\nstr(len(l))",
        "def grow(s):\n    return s + s\ns = \"ab\"\nfor i in range(40):\n    s = grow(s)\ns",
    ] {
        let e = run(source).expect_err(source);
        assert!(
            matches!(&e.kind, TemplateErrorKind::Limit(m) if m.contains("bytes of Starlark heap")),
            "{source}: {e}"
        );
    }
}

/// In a script tool's file, `run(params)` gets `time`, `random` and `http` for real: reading
/// them there is no refused access. The top level (the description) is a template as any other,
/// and the stubs a script never gets stay refused everywhere.
#[test]
fn a_scripts_run_may_use_what_scripts_get() {
    let source = "description = \"Looks up.\"\nschema = {}\nx = http\n\ndef run(params):\n    r = http.get(\"http://h/\")\n    return [r, time.iso(), random.random(), uuid]\n";
    let found = findings(source, "s", &pkg(), &session()).expect("parses");
    let seen: Vec<(usize, &str)> = found.iter().map(|f| (f.line, f.access.as_str())).collect();
    assert_eq!(seen, [(3, "http"), (7, "uuid")], "{found:?}");
    let template = "x = http\ndef helper(params):\n    return time.iso()\nx";
    let found = findings(template, "t", &pkg(), &session()).expect("parses");
    assert_eq!(found.len(), 2, "no run: a template throughout: {found:?}");
}

#[test]
fn a_script_schema_with_nan_is_refused_not_turned_into_null() {
    let source = "description = \"d\"\nschema = {\"properties\": {\"n\": {\"type\": \"number\", \"maximum\": float(\"nan\")}}}\ndef run(params):\n    return 1\n";
    let e = script_definition(source, "s", &pkg(), &session()).expect_err("NaN");
    assert!(e.to_string().contains("NaN or infinite"), "{e}");
}

#[test]
fn a_value_that_is_not_text_is_named_with_its_article() {
    let e = run("1").expect_err("an int is not text");
    assert!(
        e.to_string().contains("its value is an int, not text"),
        "{e}"
    );
    let e = run("[1]").expect_err("a list is not text");
    assert!(
        e.to_string().contains("its value is a list, not text"),
        "{e}"
    );
}

/// A source that does not parse is reported with the line and the column (from 1, in
/// characters) where Starlark's parser stopped, whichever way it is read.
#[test]
fn a_parse_error_names_its_line_and_column() {
    let source = "description = join([part(\"Repository:\", pkg.tool), tag(\"workspace\", session.workspace, kind=\"a\" kind=\"b\")])\n";
    let column = source.find(" kind=\"b\"").expect("the second kind") + 2;
    let says =
        format!("tool \"t\": description template line 1, column {column}: does not parse: ");
    let e = run(source).expect_err("does not parse");
    assert_eq!((e.line, e.column), (Some(1), u32::try_from(column).ok()));
    assert!(e.to_string().starts_with(&says), "{e}");
    assert!(e.to_string().contains("'kind'"), "{e}");
    let e = check_syntax(source, "tool \"t\"").expect_err("does not parse");
    assert!(e.to_string().starts_with(&says), "{e}");
    // Counted in characters (the string before it has 5 more bytes), on the line the parser
    // stopped on.
    let e = check_syntax("x = 1\ny = 'Größe → ü' 'a' z\n", "f.star").expect_err("does not parse");
    assert!(
        e.to_string()
            .starts_with("f.star: description template line 2, column 17: does not parse: "),
        "{e}"
    );
    // A script tool's definition and run say `script`.
    let script = "description = 'x'\nschema = {}\ndef run(params):\n    return dict(a=1 b=2)\n";
    let e = script_definition(script, "script tool \"s\"", &pkg(), &session())
        .expect_err("does not parse");
    assert!(
        e.to_string()
            .starts_with("script tool \"s\": script line 4, column 21: does not parse: "),
        "{e}"
    );
    // Errors found when running have a line only.
    let e = run("x = 1\npkg.teem").expect_err("unknown");
    assert_eq!((e.line, e.column), (Some(2), None));
}

/// Starlark reads attributes of built-in values while compiling a function's body, before it
/// runs or though it never does: a stub read there is not what stopped a render that fails
/// for another reason, which is reported as it is.
#[test]
fn a_stub_in_a_function_that_never_runs_is_not_the_error() {
    let unused = "def later():\n    return time.now()\n";
    for (rest, says) in [
        (
            "x = {}\nx[\"missing\"]\n",
            " line 4: failed: Key `\"missing\"` was not found",
        ),
        (
            "fail(\"real problem\")\n",
            " line 3: failed: fail: real problem",
        ),
        (
            "\"text\".now\n",
            " line 3: failed: Object of type `string` has no attribute `now`",
        ),
        (
            "n = 0\nfor i in range(2000000):\n    n += 1\nstr(n)\n",
            ": stopped: the CPU-step limit",
        ),
    ] {
        let source = format!("{unused}{rest}");
        let e = run(&source).expect_err("fails");
        assert!(
            e.to_string()
                .starts_with(&format!("tool \"t\": description template{says}")),
            "{source}: {e}"
        );
    }
    let e = run(&format!("{unused}pkg.teams\n")).expect_err("unknown");
    assert_eq!(
        e.to_string(),
        "tool \"t\": description template line 3: pkg.teams is not a value here (pkg has: description, name, params, team)"
    );
    // The access that does run is the one reported, wherever the function's body was read.
    let e = run(&format!("{unused}a = 1\nrandom.choice\n")).expect_err("random");
    assert_eq!(
        (e.kind, e.line),
        (TemplateErrorKind::Stub("random".into()), Some(4))
    );
    let e = run(&format!("{unused}later()\n")).expect_err("time");
    assert_eq!(
        (e.kind, e.line),
        (TemplateErrorKind::Stub("time".into()), Some(2))
    );
    // A script's definition and its run likewise.
    let script = "def run(params):\n    r = http.get(pkg.base)\n    return r\n\ndescription = part(\"Look up on\", pkg.teams)\nschema = {}\n";
    let e = script_definition(script, "s", &pkg(), &session()).expect_err("unknown");
    assert!(
        matches!(&e.kind, TemplateErrorKind::Unknown { name, .. } if name == "teams"),
        "{e}"
    );
    let script = "description = \"d\"\nschema = {}\ndef unused():\n    return uuid.new()\ndef run(params):\n    return params[\"missing\"]\n";
    let e = run_script(
        script,
        "s",
        globals(),
        &pkg(),
        &session(),
        &json!({}),
        Limits::TEMPLATE,
    )
    .expect_err("no such param");
    assert!(
        matches!(&e.kind, TemplateErrorKind::Failed(m) if m.contains("missing")),
        "{e}"
    );
}

/// In a script tool's file every function runs with `time`, `random` and `http` made real when
/// `run` calls it, so reading them in any function's body is no refused access; unless the top
/// level calls that function (directly, through another, or in a parameter's default), which
/// runs it in the template environment.
#[test]
fn a_scripts_helpers_may_use_what_scripts_get_unless_the_top_level_calls_them() {
    let script = |top: &str| {
        format!(
            "def stamp():\n    return time.iso()\n\
             def fetch(path):\n    return http.get(\"http://h\" + path)\n\
             def label():\n    return \"at \" + stamp()\n\
             def run(params):\n    return [fetch(params[\"path\"]), label(), random.random()]\n\
             schema = {{}}\n{top}"
        )
    };
    let lines = |top: &str| -> Vec<(usize, String)> {
        findings(&script(top), "s", &pkg(), &session())
            .expect("parses")
            .into_iter()
            .map(|f| (f.line, f.access))
            .collect()
    };
    assert_eq!(lines("description = \"Fetches.\"\n"), []);
    let time = vec![(2, "time".to_owned())];
    assert_eq!(lines("description = stamp()\n"), time);
    assert_eq!(
        lines("if has(pkg, \"x\"):\n    description = label()\n"),
        time,
        "through another function, on a path the sample values do not take"
    );
    assert_eq!(
        lines("def head(n=stamp()):\n    return n\ndescription = \"d\"\n"),
        time,
        "a default is evaluated by the top level"
    );
    assert_eq!(
        lines("description = str(run({\"path\": \"/\"}))\n"),
        [
            (2, "time".to_owned()),
            (4, "http".to_owned()),
            (8, "random".to_owned()),
        ]
    );
    // The stubs a script never gets are refused in any function.
    assert_eq!(
        lines("def ident():\n    return uuid.new()\ndescription = \"d\"\n"),
        [(11, "uuid".to_owned())]
    );
    // Without `run` it is a template throughout.
    let template = "def stamp():\n    return time.iso()\ndescription = \"d\"\n";
    assert_eq!(
        findings(template, "t", &pkg(), &session())
            .expect("parses")
            .len(),
        1
    );
}

/// `run` is called with the params alone: a script whose `run` cannot take them (no parameter,
/// two, a keyword-only one without a default) is refused when it is defined, naming its line,
/// and a run of it says the same rather than Starlark's error about an internal module.
#[test]
fn a_run_that_cannot_take_the_params_is_refused_naming_its_line() {
    let head = "description = \"d\"\nschema = {}\n";
    for (run, takes) in [
        ("def run():\n    return 1\n", "takes no argument"),
        ("def run(a, b):\n    return 1\n", "needs 2 arguments"),
        (
            "def run(*, x):\n    return 1\n",
            "needs the keyword-only argument `x`",
        ),
        ("run = lambda: 1\n", "takes no argument"),
    ] {
        let source = format!("{head}{run}");
        let e = script_definition(&source, "script tool \"s\"", &pkg(), &session()).expect_err(run);
        assert_eq!(
            e.to_string(),
            format!(
                "script tool \"s\": script line 3: failed: a script must define `def run(params): ...`, a function of one argument; its `run` {takes}"
            ),
            "{run}"
        );
        let e = run_script(
            &source,
            "script tool \"s\"",
            &environment(|_| {}),
            &pkg(),
            &session(),
            &Json::Null,
            Limits::TEMPLATE,
        )
        .expect_err(run);
        assert!(
            e.to_string().contains(takes) && !e.to_string().contains("description_template"),
            "{run}: {e}"
        );
    }
    for run in [
        "def run(params):\n    return 1\n",
        "def run(params, extra = 1):\n    return 1\n",
        "def run(*args):\n    return 1\n",
        "def run(p, *, x = 1, **kw):\n    return 1\n",
        "run = lambda p: 1\n",
        "run = len\n",
    ] {
        script_definition(&format!("{head}{run}"), "s", &pkg(), &session()).expect(run);
    }
    // Found in the source too, for check-template.
    let e =
        run_refusal(&format!("{head}def run(a, b):\n    return 1\n"), "t.star").expect("refused");
    assert_eq!(
        e.to_string(),
        "t.star: script line 3: failed: a script must define `def run(params): ...`, a function of one argument; its `run` needs 2 arguments"
    );
    assert_eq!(
        run_refusal(&format!("{head}def run(p):\n    return 1\n"), "t.star"),
        None
    );
    assert_eq!(run_refusal("part('a template')", "t.star"), None);
}

/// A result is written as JSON, and reading JSON recurses once per level: a run that returns a
/// value nested past [`MAX_VALUE_DEPTH`] is refused naming the tool and the limit, one at the
/// limit is returned, and a value shared many times over is walked once.
#[test]
fn a_result_nested_past_the_limit_is_refused_naming_it() {
    let nested = |n: usize| {
        format!(
            "description = \"d\"\nschema = {{}}\ndef run(params):\n    x = 1\n    for i in range({n}):\n        x = [x]\n    return x\n"
        )
    };
    let call = |source: &str| {
        run_script(
            source,
            "script tool \"s\"",
            globals(),
            &pkg(),
            &session(),
            &json!({}),
            Limits::TEMPLATE,
        )
    };
    let mut expected = json!(1);
    for _ in 0..MAX_VALUE_DEPTH {
        expected = json!([expected]);
    }
    assert_eq!(
        call(&nested(MAX_VALUE_DEPTH)).expect("at the limit"),
        expected
    );
    let e = call(&nested(MAX_VALUE_DEPTH + 1)).expect_err("past the limit");
    assert_eq!(
        e.to_string(),
        format!(
            "script tool \"s\": script: stopped: run returned a value that nests more than {MAX_VALUE_DEPTH} levels deep (lists and dicts within one another), the most a result may; return a flatter value"
        )
    );
    // Dicts and tuples count as lists do; a cycle is deeper than any limit.
    let source = "def run(params):\n    x = 1\n    for i in range(101):\n        x = {\"a\": (x,)} if i % 2 else (x,)\n    return x\n";
    assert!(matches!(
        call(source).expect_err("dicts").kind,
        TemplateErrorKind::Limit(_)
    ));
    let source = "def run(params):\n    x = []\n    x.append(x)\n    return x\n";
    assert!(matches!(
        call(source).expect_err("cycle").kind,
        TemplateErrorKind::Limit(_)
    ));
    // 2^90 paths through a value shared twice at each of 90 levels, beside one too deep.
    let source = "def run(params):\n    x = 1\n    for i in range(90):\n        x = [x, x]\n    y = 1\n    for i in range(101):\n        y = [y]\n    return [x, y]\n";
    assert!(matches!(
        call(source).expect_err("shared").kind,
        TemplateErrorKind::Limit(_)
    ));
    // A script tool's schema likewise.
    let source = format!(
        "description = \"d\"\nx = {{}}\nfor i in range({}):\n    x = {{\"a\": x}}\nschema = {{\"properties\": x}}\ndef run(params):\n    return 1\n",
        MAX_VALUE_DEPTH
    );
    let e = script_definition(&source, "script tool \"s\"", &pkg(), &session())
        .expect_err("schema too deep");
    assert!(
        e.to_string()
            .contains("`schema` nests more than 100 levels deep"),
        "{e}"
    );
}

/// A `tool_define` script's top level may not bind `description` or `schema`: `tool_define`
/// gives them, and the file it keeps puts them above the script, where such a binding would
/// replace them.
#[test]
fn a_defined_scripts_top_level_may_not_bind_description_or_schema() {
    let run = "def run(params):\n    return 1\n";
    assert!(script_top_level(run, "t", &pkg(), &session()).is_ok());
    for (top, name) in [
        ("description = 5\n", "description"),
        ("schema = \"nope\"\n", "schema"),
    ] {
        let e = script_top_level(&format!("{top}{run}"), "t", &pkg(), &session())
            .expect_err(top)
            .to_string();
        assert!(
            e.contains(&format!(
                "the script binds `{name}` at its top level, which tool_define's own `{name}` argument gives"
            )),
            "{e}"
        );
    }
}
