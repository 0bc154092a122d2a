//! The seam through which a search index gets rankers beyond BM25F (the embedding ranker lives
//! in the binary, behind a feature).

use std::sync::Arc;

use toolshelf_core::Catalog;
use toolshelf_core::search::SearchIndex;

/// Something that adds retrievers to a search index, such as the embedding ranker. The gateway
/// runs it on a background thread for every new snapshot, so model loading never delays
/// `tools/list`; the proxy runs it once per distinct tools array it sees.
#[derive(Clone)]
pub struct Enricher(pub Arc<EnrichFn>);

/// The function inside an [`Enricher`]: adds retrievers, or says why it could not.
pub type EnrichFn =
    dyn Fn(&mut SearchIndex, &Catalog) -> std::result::Result<(), String> + Send + Sync;

impl std::fmt::Debug for Enricher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Enricher")
    }
}
