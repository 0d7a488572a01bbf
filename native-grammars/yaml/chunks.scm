; Chunk definitions for YAML (tags.scm capture convention).
; Each top-level key of a document whose value is a block (a nested mapping,
; a sequence or a block scalar) is a chunk named by the key; one-line
; `key: value` pairs stay together in the surrounding module chunks.

(document
  (block_node
    (block_mapping
      (block_mapping_pair
        key: (_) @name
        value: (block_node)) @definition.module)))

; A document that is a list (Ansible plays and tasks, CI step lists...):
; each item that is a mapping with a `name:` is a chunk named by that value.
(document
  (block_node
    (block_sequence
      (block_sequence_item
        (block_node
          (block_mapping
            (block_mapping_pair
              key: (_) @_key (#eq? @_key "name")
              value: (flow_node) @name)))) @definition.module)))
