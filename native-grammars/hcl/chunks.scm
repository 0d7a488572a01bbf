; Chunk definitions for HCL / Terraform (tags.scm capture convention).
; Each top-level block is a chunk. A name can only be one node, so:
; - a block with one label is named by it (`variable "region"` -> region,
;   `module "vpc"` -> vpc, `provider "aws"` -> aws);
; - a block with two or more labels is named by the first one, the type
;   (`resource "aws_s3_bucket" "logs"` -> aws_s3_bucket): the last label is
;   often a convention such as `this` or `main` that names nothing, while the
;   type is what a searcher looks for; the full header is in the chunk text;
; - a block without labels is named by its type (`terraform`, `locals`).
; Kinds: `module` blocks -> module, `variable` and `output` -> constant,
; every other block -> object. Nested blocks stay inside their top-level
; block's chunk.

(config_file (body (block
  . (identifier) @_type (#eq? @_type "module")
  . [(string_lit (template_literal) @name) (identifier) @name]
  . (block_start)) @definition.module))

(config_file (body (block
  . (identifier) @_type (#any-of? @_type "variable" "output")
  . [(string_lit (template_literal) @name) (identifier) @name]
  . (block_start)) @definition.constant))

(config_file (body (block
  . (identifier) @_type (#not-any-of? @_type "module" "variable" "output")
  . [(string_lit (template_literal) @name) (identifier) @name]
  . (block_start)) @definition.object))

(config_file (body (block
  . (identifier)
  . [(string_lit (template_literal) @name) (identifier) @name]
  . [(string_lit) (identifier)]) @definition.object))

(config_file (body (block
  . (identifier) @name
  . (block_start)) @definition.object))

; Doc comments (`@doc`), in the tags.scm convention `(comment)* @doc .
; (definition)`: a comment is the doc of the definition it lies directly
; above (no blank line between; attributes and decorators may come between).
; Plain queries have no `#select-adjacent!`: the chunker checks the adjacency.
(comment) @doc
