//! What the index is made from: the files of a repository ([`discover`]),
//! their languages and grammars ([`lang`]), the chunks cut from their syntax
//! trees ([`chunk`]) with the definitions and references in them
//! ([`extract`]), the words BM25 counts ([`lexical`]) and the git state
//! ([`git`]). Nothing here opens the index.

pub mod chunk;
pub mod discover;
pub mod extract;
pub mod git;
pub mod lang;
pub mod lexical;
pub mod manifest;
pub mod paths;
pub mod workspace;
