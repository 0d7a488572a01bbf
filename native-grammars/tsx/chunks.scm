; Chunk definitions for TSX: the TypeScript patterns (the TSX grammar has the
; same node types plus JSX).
; inherits: typescript
