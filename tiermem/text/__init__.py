"""How text is matched: words, answers against gold, number words, persons, sentences, JSON in replies, redaction."""
