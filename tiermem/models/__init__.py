"""Models: specs resolved to directories, the verified model cache, the frozen trunk, the reader and its floors."""
