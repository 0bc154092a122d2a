//! An upper bound on how deeply a Starlark source nests, read from its tokens before it is
//! parsed.
//!
//! Starlark's parser, its evaluator and the drop of its syntax tree all recurse once per level of
//! nesting, so a short source (`x = ------…1`, a chain of 7,000 `+`, 1,500 brackets) overflows the
//! stack of the thread that parses it, and a stack overflow aborts the whole process: every
//! gateway session, every proxy conversation. The depth is bounded here, on the text, where no
//! recursion is needed. The bound is conservative: within an element of a bracket or a statement,
//! every operator and every keyword that can open an expression counts as one level, and so does
//! each enclosing bracket; an indented block counts two, a `lambda` or `def` eight (what they cost
//! the compiler's stack, measured); siblings separated by commas do not add up. Real templates
//! and tools stay far below [`MAX_DEPTH`].

/// The deepest nesting a source may have: Python refuses more than 200 nested brackets; this
/// counts operators too, and must leave the parse, the evaluation and the drop room on a 2 MiB
/// worker thread's stack.
pub const MAX_DEPTH: usize = 200;

/// Keywords that nest an expression or a statement below them.
const NESTING_WORDS: &[&str] = &[
    "and", "or", "not", "if", "else", "elif", "for", "in", "is", "while",
];

/// The levels an indented block counts for: a statement within statements costs the compiler
/// about twice an expression's stack.
const BLOCK_WEIGHT: usize = 2;

/// The levels a `lambda` or a `def` counts for.
const LAMBDA_WEIGHT: usize = 8;

/// The 1-based line where `source` first nests deeper than `limit`, if it does.
pub fn too_deep(source: &str, limit: usize) -> Option<usize> {
    let bytes = source.as_bytes();
    let mut line = 1;
    // Operators counted in the current element of each open bracket; [0] is the statement's.
    let mut levels: Vec<usize> = vec![0];
    // Widths of the enclosing indented blocks.
    let mut indents: Vec<usize> = Vec::new();
    let mut at_line_start = true;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if at_line_start && levels.len() == 1 {
            let width = bytes[i..]
                .iter()
                .take_while(|&&b| b == b' ' || b == b'\t')
                .count();
            let rest = bytes.get(i + width).copied();
            // Blank and comment lines do not open or close blocks.
            if !matches!(rest, None | Some(b'\n' | b'\r' | b'#')) {
                while indents.last().is_some_and(|&w| w >= width) {
                    indents.pop();
                }
                if width > 0 {
                    indents.push(width);
                }
            }
            at_line_start = false;
            i += width;
            continue;
        }
        match c {
            b'\n' => {
                line += 1;
                if levels.len() == 1 {
                    levels[0] = 0;
                    at_line_start = true;
                }
                i += 1;
            }
            b'#' => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'\\' => {
                // A line continued: the statement goes on.
                if bytes.get(i + 1) == Some(&b'\n') {
                    line += 1;
                    i += 2;
                } else {
                    i += 1;
                }
            }
            b'"' | b'\'' => {
                let (end, lines) = skip_string(bytes, i);
                line += lines;
                i = end;
            }
            b'(' | b'[' | b'{' => {
                *levels.last_mut().unwrap_or(&mut 0) += 1;
                levels.push(0);
                i += 1;
            }
            b')' | b']' | b'}' => {
                if levels.len() > 1 {
                    levels.pop();
                }
                i += 1;
            }
            b',' | b';' => {
                if let Some(l) = levels.last_mut() {
                    *l = 0;
                }
                i += 1;
            }
            b'+' | b'-' | b'*' | b'/' | b'%' | b'&' | b'|' | b'^' | b'~' | b'<' | b'>' | b'='
            | b'!' | b'.' | b'@' => {
                // A run of operator characters (`**`, `<=`, `//=`) is one operator.
                while i < bytes.len() && b"+-*/%&|^~<>=!.@".contains(&bytes[i]) {
                    // Each unary sign nests on its own: `- - -1`, `--1`.
                    if matches!(bytes[i], b'-' | b'+' | b'~') {
                        *levels.last_mut().unwrap_or(&mut 0) += 1;
                    }
                    i += 1;
                }
                *levels.last_mut().unwrap_or(&mut 0) += 1;
            }
            c if c == b'_' || c.is_ascii_alphabetic() => {
                let start = i;
                while i < bytes.len() && (bytes[i] == b'_' || bytes[i].is_ascii_alphanumeric()) {
                    i += 1;
                }
                let word = &source[start..i];
                // A string prefix (`r"…"`, `b'…'`) is read with its string.
                if matches!(bytes.get(i), Some(b'"' | b'\'')) && word.len() <= 2 {
                    let (end, lines) = skip_string(bytes, i);
                    line += lines;
                    i = end;
                } else if NESTING_WORDS.contains(&word) {
                    *levels.last_mut().unwrap_or(&mut 0) += 1;
                } else if word == "lambda" || word == "def" {
                    // A function within a function costs the compiler far more stack per level.
                    *levels.last_mut().unwrap_or(&mut 0) += LAMBDA_WEIGHT;
                }
            }
            _ => i += 1,
        }
        let depth = BLOCK_WEIGHT * indents.len() + levels.len() + levels.iter().sum::<usize>();
        if depth > limit {
            return Some(line);
        }
    }
    None
}

/// The end of the string literal opening at `start`, and how many line breaks it holds. An
/// unterminated string runs to the end: the parser reports it.
fn skip_string(bytes: &[u8], start: usize) -> (usize, usize) {
    let quote = bytes[start];
    let triple = bytes.get(start + 1) == Some(&quote) && bytes.get(start + 2) == Some(&quote);
    let mut i = start + if triple { 3 } else { 1 };
    let mut lines = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => {
                if bytes.get(i + 1) == Some(&b'\n') {
                    lines += 1;
                }
                i += 2;
                continue;
            }
            b'\n' => {
                lines += 1;
                if !triple {
                    return (i, lines - 1);
                }
            }
            q if q == quote => {
                if !triple {
                    return (i + 1, lines);
                }
                if bytes.get(i + 1) == Some(&quote) && bytes.get(i + 2) == Some(&quote) {
                    return (i + 3, lines);
                }
            }
            _ => {}
        }
        i += 1;
    }
    (bytes.len(), lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depth_ok(source: &str) -> bool {
        too_deep(source, MAX_DEPTH).is_none()
    }

    #[test]
    fn ordinary_sources_pass() {
        let long_list = format!(
            "x = [{}]\n",
            (0..5000)
                .map(|i| format!("-{i}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let long_dict = format!(
            "d = {{{}}}\n",
            (0..2000)
                .map(|i| format!("\"k{i}\": a.b.c + {i} * 2"))
                .collect::<Vec<_>>()
                .join(",\n  ")
        );
        let many_lines: String = (0..3000)
            .map(|i| format!("x{i} = a + b - c * d\n"))
            .collect();
        let strings = format!(
            "s = \"{}\" + '''{}'''\n",
            "((((+-".repeat(500),
            "[[[\n".repeat(500)
        );
        for source in [
            long_list.as_str(),
            &long_dict,
            &many_lines,
            &strings,
            "def describe():\n    if pkg.name:\n        return \"%s (%d)\" % (pkg.name, len(pkg.tools))\n    return \"\"\n",
            "# ((((((((((((((((((\nx = 1\n",
        ] {
            assert!(depth_ok(source), "{}", &source[..source.len().min(80)]);
        }
    }

    #[test]
    fn deep_sources_are_refused_with_their_line() {
        let cases = [
            format!("x = 1\ny = {}1\n", "-".repeat(300)),
            format!("x = {}\n", vec!["1"; 300].join("+")),
            format!("x = {}1{}\n", "(".repeat(300), ")".repeat(300)),
            format!("x = {}True\n", "not ".repeat(300)),
            format!("x = \"a\"{}\n", ".upper()".repeat(150)),
            format!("x = {}1\n", "1 if True else ".repeat(150)),
            format!("x = {}\n", "lambda: ".repeat(300) + "1"),
            (0..250)
                .map(|i| format!("{}if x:\n", " ".repeat(i)))
                .collect::<String>()
                + &" ".repeat(250)
                + "pass\n",
        ];
        for source in &cases {
            let line = too_deep(source, MAX_DEPTH);
            assert!(line.is_some(), "{}", &source[..source.len().min(80)]);
        }
        assert_eq!(too_deep(&cases[0], MAX_DEPTH), Some(2));
    }
}
