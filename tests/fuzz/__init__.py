"""The fuzz test: random small programs exported with onnxport and run at onnxruntime's default settings."""
