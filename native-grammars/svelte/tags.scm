; Code graph references for Svelte single-file components: the TypeScript patterns.
; inherits: typescript
