; Code graph references for Vue single-file components: the TypeScript patterns.
; inherits: typescript
