"""The byte-level BPE alphabet (tokenizers' ByteLevel, GPT-2's bytes_to_unicode), for the
tests that build or read such a vocabulary (tests/fs/test_scheme_w4a4.py,
tests/peer/test_tokenize.py)."""


def bytelevel_table():
    """{the character that stands for byte b: b} for the 256 bytes."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
          list(range(ord("®"), ord("ÿ") + 1)))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}
