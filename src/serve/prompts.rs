//! Slash commands (MCP prompts) that ask the agent to use ken's tools.

use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{PromptMessage, Role};
use rmcp::{prompt, prompt_router, ErrorData};

use super::wire::{Args, QueryPromptArgs, SymbolPromptArgs};
use super::KenServer;

fn user_prompt(text: String) -> Result<Vec<PromptMessage>, ErrorData> {
    Ok(vec![PromptMessage::new_text(Role::User, text)])
}

/// Slash commands for clients that show MCP prompts (e.g. Claude Code).
#[prompt_router(vis = "pub(super)")]
impl KenServer {
    #[prompt(name = "search", description = "Search the codebase with ken")]
    async fn search_prompt(
        &self,
        Parameters(Args(args)): Parameters<Args<QueryPromptArgs>>,
    ) -> Result<Vec<PromptMessage>, ErrorData> {
        user_prompt(format!(
            "Use the codebase_search tool of the ken MCP server to find: {}\nList the best results as \
             `path:start-end symbol` with why each matches, then answer using the returned code.",
            args.query
        ))
    }

    #[prompt(name = "find", description = "Find the definition of a symbol with ken")]
    async fn find_prompt(
        &self,
        Parameters(Args(args)): Parameters<Args<SymbolPromptArgs>>,
    ) -> Result<Vec<PromptMessage>, ErrorData> {
        user_prompt(format!(
            "Use the codebase_search tool of the ken MCP server with the query `{}` to find its definition; \
             show where it is defined and summarise what it does.",
            args.symbol
        ))
    }

    #[prompt(name = "call-graph", description = "Who calls a symbol, and what it calls")]
    async fn call_graph_prompt(
        &self,
        Parameters(Args(args)): Parameters<Args<SymbolPromptArgs>>,
    ) -> Result<Vec<PromptMessage>, ErrorData> {
        user_prompt(format!(
            "Use the call_graph tool of the ken MCP server for `{}` (callers, then callees). If the index has no \
             graph, say so and use codebase_search for its definition and mentions instead.",
            args.symbol
        ))
    }

    #[prompt(name = "index", description = "Index or refresh the codebase index")]
    async fn index_prompt(&self) -> Result<Vec<PromptMessage>, ErrorData> {
        user_prompt(
            "Call the index_codebase tool of the ken MCP server, then report files, chunks, languages and \
             embedding coverage."
                .to_string(),
        )
    }

    #[prompt(name = "status", description = "What ken's index holds")]
    async fn status_prompt(&self) -> Result<Vec<PromptMessage>, ErrorData> {
        user_prompt(
            "Call the index_status tool of the ken MCP server and summarise files, chunks, languages, \
             embedding coverage, branch and when it was last indexed."
                .to_string(),
        )
    }
}
