"""Stand-alone scripts the engines run with another environment's Python (vLLM's, TensorRT-LLM's).

They import nothing of tradeoff and live apart from tasks/engines/ so that a script's folder, which
Python puts first on sys.path, holds no module named like the engine packages (vllm, tensorrt_llm).
"""
