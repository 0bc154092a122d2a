//! An upper bound on how deeply a Starlark source nests, read from its tokens before it is
//! parsed.
//!
//! Starlark's parser, its evaluator and the drop of its syntax tree all recurse once per level of
//! nesting, so a short source (`x = ------…1`, a chain of 7,000 `+`, 1,500 brackets) overflows the
//! stack of the thread that parses it, and a stack overflow aborts the whole process: every
//! gateway session, every proxy conversation. The depth is bounded here, on the text, where no
//! recursion is needed. The bound is conservative: within an element of a bracket or a statement,
//! every operator (each unary sign on its own, `a - -1` being two) and every keyword that can open
//! an expression counts as one level, and so does each enclosing bracket, so that 200 nested
//! brackets are 200 levels; the brackets of a call or an index (`f(x)`, `a[i]`: a bracket right
//! after an operand) count one more, the call nesting what it is called on (`a.b().c()`); an
//! indented block counts two, and so does each `elif` of a chain (the
//! parser nests the rest of the chain under it); a `lambda` or `def` counts eight (what they cost
//! the compiler's stack, measured); siblings separated by commas do not add up, but the commas
//! between a `lambda`'s parameters or a `for`'s targets separate no siblings. Real templates and
//! tools stay far below [`MAX_DEPTH`].
//!
//! The text is split as Starlark's lexer splits it: lines joined by `\` before the line break
//! (LF or CRLF) are one statement, in a string too; `\r` is skipped in indentation; a string
//! starts at a quote or at `r`, `b`, `br`, `rb` right before one (no other word is a prefix); a
//! number is read whole (`0b1or` is a number and `or`). An f-string is refused here: its `{...}`
//! parts are code the parser reads (even where the dialect then refuses f-strings), inside text
//! this bound skips.

/// The deepest nesting a source may have: as in Python, 200 nested brackets pass and 201 do not;
/// this counts operators too, and must leave the parse, the evaluation and the drop room on a
/// 2 MiB thread's stack.
pub const MAX_DEPTH: usize = 200;

/// Keywords after which a bracket opens a list, a tuple, a dict or a group, not a call or an
/// index (any other word is taken for an operand, which counts a bracket after it one more).
const NOT_OPERANDS: &[&str] = &[
    "and", "or", "not", "if", "else", "elif", "for", "in", "is", "while", "lambda", "return",
];

/// Keywords that nest an expression or a statement below them.
const NESTING_WORDS: &[&str] = &[
    "and", "or", "not", "if", "else", "elif", "for", "in", "is", "while",
];

/// The words Starlark's lexer reads with a quote right after them as the start of a string.
const STRING_PREFIXES: &[&str] = &["r", "b", "br", "rb"];

/// The words that start an f-string with a quote right after them.
const FSTRING_PREFIXES: &[&str] = &["f", "fr"];

/// The levels an indented block counts for: a statement within statements costs the compiler
/// about twice an expression's stack. An `elif` counts as much.
const BLOCK_WEIGHT: usize = 2;

/// The levels a `lambda` or a `def` counts for.
const LAMBDA_WEIGHT: usize = 8;

/// Why a source is refused before it is parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// It nests deeper than the limit, first on this line (from 1).
    TooDeep(usize),
    /// It holds an f-string, starting on this line (from 1).
    FString(usize),
}

/// A construct open in an element whose head holds commas that separate no siblings: a
/// `lambda`'s parameters (up to its `:`), a `for`'s targets (up to its `in`).
#[derive(Debug)]
struct Open {
    /// The element's count before the construct.
    base: usize,
    /// What the construct counts for.
    weight: usize,
    /// Whether its head is still being read.
    in_head: bool,
    /// `lambda` (its head ends at `:`) or `for` (at `in`).
    lambda: bool,
}

/// One element of a bracket (or of the statement): what it counts, and its open constructs.
#[derive(Debug, Default)]
struct Element {
    count: usize,
    open: Vec<Open>,
}

/// An indented block (or the top level): its indentation, and the `elif`s of the chain its
/// current statement is in.
#[derive(Debug)]
struct Block {
    width: usize,
    elifs: usize,
}

/// The nesting being read, with its total kept as it changes.
struct Depth {
    elements: Vec<Element>,
    blocks: Vec<Block>,
    /// Every element's count, and one for each but the statement's own: the brackets open.
    expression: usize,
    /// The blocks' and the `elif`s' levels.
    statement: usize,
}

impl Depth {
    fn new() -> Self {
        Self {
            elements: vec![Element::default()],
            blocks: vec![Block { width: 0, elifs: 0 }],
            expression: 0,
            statement: 0,
        }
    }

    fn total(&self) -> usize {
        self.expression + self.statement
    }

    fn top(&mut self) -> &mut Element {
        let last = self.elements.len() - 1;
        &mut self.elements[last]
    }

    fn add(&mut self, n: usize) {
        self.top().count += n;
        self.expression += n;
    }

    /// Sets the current element's count to `n`.
    fn set(&mut self, n: usize) {
        let top = self.top();
        let old = std::mem::replace(&mut top.count, n);
        self.expression = self.expression - old + n;
    }

    /// A bracket opens: a level, and one more in the element around it for a call's or an
    /// index's (`after_operand`), which nests what it is called on.
    fn open_bracket(&mut self, after_operand: bool) {
        if after_operand {
            self.add(1);
        }
        self.elements.push(Element::default());
        self.expression += 1;
    }

    fn close_bracket(&mut self) {
        if self.elements.len() > 1 {
            let e = self.elements.pop().unwrap_or_default();
            self.expression -= 1 + e.count;
        }
    }

    /// A statement ends: its element starts afresh.
    fn end_statement(&mut self) {
        self.set(0);
        self.top().open.clear();
    }

    /// A comma: what is open in the element ends, but for a construct still in its head.
    fn comma(&mut self) {
        let top = self.top();
        while top.open.last().is_some_and(|o| !o.in_head) {
            top.open.pop();
        }
        let n = top.open.last().map_or(0, |o| o.base + o.weight);
        self.set(n);
    }

    /// `lambda` (its head ends at `:`) or `for` (at `in`).
    fn open(&mut self, weight: usize, lambda: bool) {
        let base = self.top().count;
        self.top().open.push(Open {
            base,
            weight,
            in_head: true,
            lambda,
        });
        self.add(weight);
    }

    /// The `:` of a lambda or the `in` of a for ends the innermost head of that kind.
    fn end_head(&mut self, lambda: bool) {
        if let Some(o) = self.top().open.last_mut()
            && o.in_head
            && o.lambda == lambda
        {
            o.in_head = false;
        }
    }

    /// A statement starts at indentation `width`, with `word`.
    fn statement_start(&mut self, width: usize, word: &str) {
        while self.blocks.len() > 1 && self.blocks.last().is_some_and(|b| b.width > width) {
            let b = self.blocks.pop().unwrap_or(Block { width: 0, elifs: 0 });
            self.statement -= BLOCK_WEIGHT * (1 + b.elifs);
        }
        if self.blocks.last().is_some_and(|b| b.width < width) {
            self.blocks.push(Block { width, elifs: 0 });
            self.statement += BLOCK_WEIGHT;
        }
        let Some(b) = self.blocks.last_mut() else {
            return;
        };
        match word {
            // The parser reads an `elif` as a statement nested in the `if` before it.
            "elif" => {
                b.elifs += 1;
                self.statement += BLOCK_WEIGHT;
            }
            "else" => {}
            _ => {
                self.statement -= BLOCK_WEIGHT * b.elifs;
                b.elifs = 0;
            }
        }
    }
}

/// Checks that `source` nests at most `limit` levels deep and holds no f-string; the first
/// problem, with its line (from 1), if not.
pub fn check(source: &str, limit: usize) -> Result<(), Refusal> {
    let bytes = source.as_bytes();
    let mut line = 1;
    let mut depth = Depth::new();
    let mut at_line_start = true;
    // Whether the last token was an operand (a name, a number, a string, a closed bracket), so
    // that a bracket now is a call's or an index's.
    let mut operand = false;
    let mut i = 0;
    while i < bytes.len() {
        if at_line_start && depth.elements.len() == 1 {
            // Indentation as the lexer reads it: spaces count, `\r` is skipped (a tab is an
            // error there).
            let mut j = i;
            let mut width = 0;
            while let Some(&b) = bytes.get(j) {
                match b {
                    b' ' => width += 1,
                    b'\t' => width += 8,
                    b'\r' => {}
                    _ => break,
                }
                j += 1;
            }
            // Blank and comment lines do not open or close blocks.
            if !matches!(bytes.get(j), None | Some(b'\n' | b'#')) {
                depth.statement_start(width, word_at(source, j));
            }
            at_line_start = false;
            i = j;
            continue;
        }
        match bytes[i] {
            b'\n' => {
                line += 1;
                if depth.elements.len() == 1 {
                    depth.end_statement();
                    at_line_start = true;
                    operand = false;
                }
                i += 1;
            }
            b'#' => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'\\' => {
                // A line continued (LF or CRLF): the statement goes on.
                if bytes.get(i + 1) == Some(&b'\n') {
                    line += 1;
                    i += 2;
                } else if bytes.get(i + 1..i + 3) == Some(b"\r\n") {
                    line += 1;
                    i += 3;
                } else {
                    i += 1;
                }
            }
            b'"' | b'\'' => {
                let (end, lines) = skip_string(bytes, i);
                line += lines;
                i = end;
                operand = true;
            }
            b'(' | b'[' | b'{' => {
                depth.open_bracket(operand);
                operand = false;
                i += 1;
            }
            b')' | b']' | b'}' => {
                depth.close_bracket();
                operand = true;
                i += 1;
            }
            b',' => {
                depth.comma();
                operand = false;
                i += 1;
            }
            b';' => {
                depth.end_statement();
                operand = false;
                i += 1;
            }
            b':' => {
                depth.end_head(true);
                operand = false;
                i += 1;
            }
            b'0'..=b'9' => {
                i = number_end(bytes, i);
                operand = true;
            }
            b'+' | b'-' | b'*' | b'/' | b'%' | b'&' | b'|' | b'^' | b'~' | b'<' | b'>' | b'='
            | b'!' | b'.' | b'@' => {
                // A run of operator characters after an operand starts with one binary operator
                // (`**`, `<=`, `//=`, `.`), a level; each unary sign in it after that, or in a
                // run after no operand, nests on its own (`a - -1`, `- - -1`, `--1`).
                let binary = operand;
                let start = i;
                let mut levels = usize::from(binary);
                let mut other = false;
                while i < bytes.len() && b"+-*/%&|^~<>=!.@".contains(&bytes[i]) {
                    if matches!(bytes[i], b'-' | b'+' | b'~') && !(binary && i == start) {
                        levels += 1;
                    } else {
                        other = true;
                    }
                    i += 1;
                }
                // What no operand comes before and is no sign (`**kwargs`) counts one.
                if !binary && other {
                    levels += 1;
                }
                depth.add(levels);
                operand = false;
            }
            c if c == b'_' || c.is_ascii_alphabetic() => {
                let word = word_at(source, i);
                i += word.len();
                operand = !NOT_OPERANDS.contains(&word);
                let quoted = matches!(bytes.get(i), Some(b'"' | b'\''));
                if quoted && FSTRING_PREFIXES.contains(&word) {
                    return Err(Refusal::FString(line));
                }
                if quoted && STRING_PREFIXES.contains(&word) {
                    // A raw or bytes literal, read with its string.
                    let (end, lines) = skip_string(bytes, i);
                    line += lines;
                    i = end;
                } else if word == "lambda" {
                    // A function within a function costs the compiler far more stack per level.
                    depth.open(LAMBDA_WEIGHT, true);
                } else if word == "def" {
                    depth.add(LAMBDA_WEIGHT);
                } else if word == "for" {
                    depth.open(1, false);
                } else if word == "in" {
                    depth.add(1);
                    depth.end_head(false);
                } else if NESTING_WORDS.contains(&word) {
                    depth.add(1);
                }
            }
            _ => i += 1,
        }
        if depth.total() > limit {
            return Err(Refusal::TooDeep(line));
        }
    }
    Ok(())
}

/// The identifier or keyword starting at `i` (empty when none does).
fn word_at(source: &str, i: usize) -> &str {
    let bytes = source.as_bytes();
    let mut end = i;
    if bytes
        .get(i)
        .is_some_and(|&b| b == b'_' || b.is_ascii_alphabetic())
    {
        while end < bytes.len() && (bytes[end] == b'_' || bytes[end].is_ascii_alphanumeric()) {
            end += 1;
        }
    }
    &source[i..end]
}

/// The end of the number starting at `start` (a digit), read as Starlark's lexer reads one: the
/// longest of an integer (`0x1f`, `0b1`, `0o7`, `12`) and a float (`1.`, `1.5e-3`, `1e5`).
fn number_end(bytes: &[u8], start: usize) -> usize {
    let run = |from: usize, ok: fn(u8) -> bool| {
        let mut i = from;
        while i < bytes.len() && ok(bytes[i]) {
            i += 1;
        }
        i
    };
    let digits = run(start, |b| b.is_ascii_digit());
    // `[eE][-+]?[0-9]+` at `i`, if there.
    let exponent = |i: usize| {
        if !matches!(bytes.get(i), Some(b'e' | b'E')) {
            return None;
        }
        let sign = usize::from(matches!(bytes.get(i + 1), Some(b'+' | b'-')));
        let end = run(i + 1 + sign, |b| b.is_ascii_digit());
        (end > i + 1 + sign).then_some(end)
    };
    let mut end = digits;
    if bytes[start] == b'0' {
        let radix: Option<fn(u8) -> bool> = match bytes.get(start + 1) {
            Some(b'x' | b'X') => Some(|b: u8| b.is_ascii_hexdigit()),
            Some(b'b' | b'B') => Some(|b: u8| b == b'0' || b == b'1'),
            Some(b'o' | b'O') => Some(|b: u8| (b'0'..=b'7').contains(&b)),
            _ => None,
        };
        // `0x` with no digit after it is the number `0`.
        if let Some(r) = radix
            .map(|ok| run(start + 2, ok))
            .filter(|&r| r > start + 2)
        {
            end = end.max(r);
        }
    }
    if bytes.get(digits) == Some(&b'.') {
        let fraction = run(digits + 1, |b| b.is_ascii_digit());
        end = end.max(exponent(fraction).unwrap_or(fraction));
    }
    if let Some(e) = exponent(digits) {
        end = end.max(e);
    }
    end
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
                // An escaped character, or a line continued (LF or CRLF) within the string.
                if bytes.get(i + 1) == Some(&b'\n') {
                    lines += 1;
                } else if bytes.get(i + 1..i + 3) == Some(b"\r\n") {
                    lines += 1;
                    i += 1;
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
        check(source, MAX_DEPTH).is_ok()
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
            "s = \"{}\" + '''{}''' + r\"{}\" + b'{}'\n",
            "((((+-".repeat(500),
            "[[[\n".repeat(500),
            "-or-".repeat(500),
            "not ".repeat(500),
        );
        let lambdas = format!("fs = [{}]\n", vec!["lambda a, b=1: a + b"; 100].join(", "));
        let elifs = format!(
            "def run(params):\n    if x == 0:\n        return 0\n{}    else:\n        return -1\n",
            (1..40)
                .map(|i| format!("    elif x == {i}:\n        return {i}\n"))
                .collect::<String>()
        );
        let numbers = format!(
            "x = [{}]\n",
            vec!["0x1f, 1e5, 1.5e-3, 0b101"; 500].join(", ")
        );
        for source in [
            long_list.as_str(),
            &long_dict,
            &many_lines,
            &strings,
            &lambdas,
            &elifs,
            &numbers,
            "def describe():\n    if pkg.name:\n        return \"%s (%d)\" % (pkg.name, len(pkg.tools))\n    return \"\"\n",
            "# ((((((((((((((((((\nx = 1\n",
            "for a, b in [(1, 2)]:\n    x = [y for y, z in {}.items() if z]\n",
            "def run(params):\r\n    return 1\r\n",
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
            let refused = check(source, MAX_DEPTH);
            assert!(
                matches!(refused, Err(Refusal::TooDeep(_))),
                "{}",
                &source[..source.len().min(80)]
            );
        }
        assert_eq!(check(&cases[0], MAX_DEPTH), Err(Refusal::TooDeep(2)));
    }

    /// The deepest source that passes, as the count is documented: a bracket is a level, a
    /// call's or an index's bracket two, every operator and nesting keyword one; the statement
    /// itself is none.
    #[test]
    fn the_limit_is_where_the_documented_count_puts_it() {
        let deepest = |make: &dyn Fn(usize) -> String| {
            (1..=2 * MAX_DEPTH)
                .take_while(|&n| depth_ok(&make(n)))
                .last()
                .unwrap_or(0)
        };
        let nested =
            |open: &str, close: &str, n: usize| format!("{}1{}\n", open.repeat(n), close.repeat(n));
        assert_eq!(deepest(&|n| nested("[", "]", n)), MAX_DEPTH, "lists");
        assert_eq!(deepest(&|n| nested("(", ")", n)), MAX_DEPTH, "parentheses");
        assert_eq!(deepest(&|n| nested("{1: ", "}", n)), MAX_DEPTH, "dicts");
        assert_eq!(
            deepest(&|n| format!("{}True\n", "not ".repeat(n))),
            MAX_DEPTH,
            "not"
        );
        assert_eq!(
            deepest(&|n| format!("{}1\n", "-".repeat(n))),
            MAX_DEPTH,
            "minus"
        );
        // `=` is an operator; `str(` a call, two.
        assert_eq!(
            deepest(&|n| format!("x = {}", nested("[", "]", n))),
            MAX_DEPTH - 1
        );
        assert_eq!(
            deepest(&|n| format!("str({})", nested("[", "]", n))),
            MAX_DEPTH - 2
        );
        assert_eq!(deepest(&|n| nested("f(", ")", n)), MAX_DEPTH / 2, "calls");
        // Each index or call nests the ones before it: what it leaves behind adds up.
        assert_eq!(
            deepest(&|n| format!("a{}\n", "[0]".repeat(n))),
            MAX_DEPTH - 1,
            "indexes"
        );
        assert_eq!(
            deepest(&|n| format!("a{}\n", ".b()".repeat(n))),
            MAX_DEPTH / 2 - 1,
            "a method chain"
        );
        assert_eq!(
            deepest(&|n| format!("return {}", nested("[", "]", n))),
            MAX_DEPTH
        );
        // A binary operator is one level, a sign after it one more.
        for op in ["+", "-", "*", " or "] {
            let chain = |n: usize| format!("{}\n", vec!["1"; n + 1].join(op));
            assert_eq!(deepest(&chain), MAX_DEPTH, "a chain of {op:?}");
        }
        assert_eq!(
            deepest(&|n| format!("{}1\n", "1 - -".repeat(n))),
            MAX_DEPTH / 2
        );
    }

    /// Forms the lexer reads as one statement, one token or one chain, which a reading that
    /// stops at every `\n`, takes any short word before a quote for a prefix or lets a comma end
    /// a lambda's parameters would see as shallow.
    #[test]
    fn what_the_lexer_joins_counts_as_one() {
        let cases = [
            // Lines continued by `\` and CRLF are one line.
            format!(
                "def run(params):\r\n    return 1\r\nx = {}1\r\n",
                vec!["-".repeat(150); 100].join("\\\r\n")
            ),
            // A string continued by `\` and CRLF does not end at the line break.
            format!("x = \"a\\\r\n\" + {}1\n", "-".repeat(300)),
            // `or` before a quote is a keyword, not a string prefix.
            format!("x = {}\"\"\n", "\"\"or".repeat(4000)),
            // A lambda's parameters separate no siblings.
            format!("x = {}1\n", "lambda a,b:".repeat(1450)),
            format!("x = {}1\n", "lambda a=1,b=(2,3):".repeat(30)),
            // A number is read whole: `0b1or` is `0b1` and `or`.
            format!("x = {}0\n", "0b1or ".repeat(300)),
            format!("x = {}0\n", "1e5or ".repeat(300)),
            // An `elif` chain nests each `elif` in the one before.
            format!("if 1:0\n{}", "elif 1:0\n".repeat(150)),
            // `\r` in indentation is skipped, so these blocks nest.
            (0..120)
                .map(|i| format!("\r{}if 1:\n", " ".repeat(i)))
                .collect::<String>()
                + "\r"
                + &" ".repeat(120)
                + "pass\n",
        ];
        for source in &cases {
            assert!(
                matches!(check(source, MAX_DEPTH), Err(Refusal::TooDeep(_))),
                "{:?}",
                &source[..source.len().min(80)]
            );
        }
        assert_eq!(
            check(&cases[0], MAX_DEPTH),
            Err(Refusal::TooDeep(4)),
            "the physical line where the continued statement gets too deep"
        );
    }

    #[test]
    fn an_f_string_is_refused_with_its_line() {
        for (source, line) in [
            (format!("x = 1\ny = f\"{{{}1}}\"\n", "-".repeat(16000)), 2),
            ("x = fr'{a}'\n".to_owned(), 1),
            ("s = '''\n'''\nt = f'x'\n".to_owned(), 3),
        ] {
            assert_eq!(check(&source, MAX_DEPTH), Err(Refusal::FString(line)));
        }
        for source in [
            "x = 'f' + \"f\"\n",
            "x = elf'a'\n",
            "x = r'f\"'\n",
            "# f'x'\n",
        ] {
            assert!(depth_ok(source), "{source}");
        }
    }

    #[test]
    fn numbers_are_read_as_the_lexer_reads_them() {
        for (text, end) in [
            ("0x1for", 4),
            ("0b1or", 3),
            ("0b12", 3),
            ("0o17x", 4),
            ("0x", 1),
            ("12or", 2),
            ("1.or", 2),
            ("1.5e-3or", 6),
            ("1e5or", 3),
            ("1eor", 1),
            ("1.e5", 4),
        ] {
            assert_eq!(number_end(text.as_bytes(), 0), end, "{text}");
        }
    }
}
