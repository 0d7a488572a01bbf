//! The server's idle searchers, per base, reused across tool calls.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use crate::search::kb::PROJECT;
use crate::search::Searcher;

/// Idle searchers per base (`project` or a knowledge base's name).
#[derive(Default)]
pub(super) struct SearcherPool {
    idle: Mutex<HashMap<String, Vec<Searcher>>>,
    /// The project's model is being loaded in the background
    /// ([`KenServer::load_model_in_background`]): new project searchers answer
    /// hybrid searches lexically meanwhile.
    pub(super) model_loading: Arc<AtomicBool>,
}

impl SearcherPool {
    pub(super) fn take(&self, base: &str, root: &Path, index_dir: &Path) -> anyhow::Result<Searcher> {
        let pooled = self
            .idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(base)
            .and_then(Vec::pop);
        let open = || -> anyhow::Result<Searcher> {
            let mut searcher = Searcher::open(root, index_dir)?;
            if base == PROJECT {
                searcher.defer_model_while(self.model_loading.clone());
            }
            Ok(searcher)
        };
        match pooled {
            // A searcher of another branch (HEAD moved) is not reused.
            Some(mut s) => match s.refresh(root) {
                true => Ok(s),
                false => open(),
            },
            None => open(),
        }
    }

    pub(super) fn give(&self, base: &str, searcher: Searcher) {
        self.idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(base.to_string())
            .or_default()
            .push(searcher);
    }

    /// Pooled searchers hold the old vector file and branch; start afresh.
    pub(super) fn clear(&self) {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}
