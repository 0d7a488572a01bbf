#!/usr/bin/env python3
"""Writes src/source/common-words.txt: the 2,000 most frequent English words.

The list is the first 2,000 whole, ASCII-alphabetic words of the built-in
model's WordPiece vocabulary (all-MiniLM-L6-v2, BERT's uncased vocabulary),
which lists its words by their frequency in English Wikipedia and BooksCorpus.
2,000 is the size of West's General Service List of English, not a value
fitted on an eval (3,000 also let `voice` and `spoken` pass as mere wording
in "convert spoken voice commands into input events", off-topic for pixi).

  python3 scripts/common-words.py [--tokenizer PATH] [--out PATH]

The tokenizer is the one `ken model fetch` stores
(~/.cache/ken/models/all-MiniLM-L6-v2/tokenizer.json).
"""
import argparse
import json
import os

COUNT = 2000


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    cache = os.environ.get('KEN_CACHE_DIR', os.path.expanduser('~/.cache/ken'))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--tokenizer', default=os.path.join(cache, 'models', 'all-MiniLM-L6-v2', 'tokenizer.json'))
    ap.add_argument('--out', default=os.path.join(here, '..', 'src', 'source', 'common-words.txt'))
    args = ap.parse_args()
    with open(args.tokenizer) as f:
        vocab = json.load(f)['model']['vocab']
    # Special tokens, [unused*] slots and single characters come first; whole words follow "the".
    first = vocab['the']
    ranked = sorted((i, w) for w, i in vocab.items() if i >= first and w.isascii() and w.isalpha())
    words = [w for _, w in ranked[:COUNT]]
    with open(args.out, 'w') as f:
        f.write('\n'.join(words) + '\n')
    print(f'{len(words)} words to {args.out} ({words[0]} .. {words[-1]})')


if __name__ == '__main__':
    main()
