; Chunk definitions for Svelte single-file components: the TypeScript patterns,
; over the code of their <script> blocks (`chunk::parse_text` blanks the rest).
; inherits: typescript
