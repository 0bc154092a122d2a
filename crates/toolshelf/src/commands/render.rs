//! `toolshelf render`: the tool definitions the model is sent.

use anyhow::Result;

use super::{FormatArg, errln, outln, print_json};
use crate::inputs::Source;

/// Arguments of `render`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    source: Source,
    /// Wire format of the definitions (default: anthropic).
    #[arg(long, value_enum)]
    format: Option<FormatArg>,
    /// Print only tool_search's description (the preamble and the deferred index), as text.
    #[arg(long)]
    index_only: bool,
}

pub fn run(args: Args) -> Result<()> {
    // The index is text in every format: a --format would be silently ignored.
    if args.index_only && args.format.is_some() {
        anyhow::bail!(
            "--format applies to the tool definitions, and --index-only prints tool_search's description as text, the same in every format; leave one of them out"
        );
    }
    let loaded = args.source.load()?;
    loaded.warn_index();
    if args.index_only {
        match loaded.surface.tool_search_description() {
            Some(d) => outln!("{d}"),
            None => errln!(
                "toolshelf: note: no tool is deferred, so there is no tool_search and no index"
            ),
        }
        return Ok(());
    }
    print_json(
        &loaded
            .surface
            .tools(&loaded.catalog, args.format.unwrap_or_default().into()),
    )
}
