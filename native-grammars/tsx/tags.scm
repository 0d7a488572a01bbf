; Code graph references for TSX: the TypeScript patterns.
; inherits: typescript
