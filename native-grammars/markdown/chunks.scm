; Markdown is chunked by headings: each section (a heading and what follows
; it up to the next heading of the same or a higher level) is a chunk, and
; its subsections are chunks of their own.

(section (atx_heading heading_content: (_) @name)) @definition.section
(section (setext_heading heading_content: (_) @name)) @definition.section
