"""Package definition of parl; build and tool settings live in pyproject.toml."""

from pathlib import Path

from setuptools import find_packages, setup

setup(
    # The import package is ``parl``; the distribution has a name of its own: "parl" on PyPI is
    # PaddlePaddle's PARL, a different framework that installs a package ``parl`` too.
    name="parl-rl",
    version="0.1.0",
    description="PARL-style reinforcement learning on PaddlePaddle 3: many agents, batched network calls",
    long_description=Path(__file__).with_name("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["parl", "parl.*"]),
    package_data={"parl": ["py.typed"]},
    install_requires=[
        "paddlepaddle>=3.0",
        "numpy>=1.24",
        "gymnasium>=0.29",
        "greenlet>=3.0",
        # Checkpoints: data-only files (parl.utils.safe_store); also a dependency of paddlepaddle.
        "safetensors>=0.4",
        # Config fields declare their bounds with it (parl.utils.config_check); typed-CLI tools read the same.
        "annotated-types>=0.6",
        # TensorBoard event files: its protocol buffers and checksum (parl.training.tensorboard).
        "tensorboardX>=2.6",
        # The typed command line (parl.cli): per-field --help from the config dataclasses' docstrings.
        "tyro>=0.9",
        # `parl train --config file.yaml` and `--show-config`.
        "pyyaml>=6",
        # The terminal progress bar (parl.training.progress); tyro needs it too.
        "rich>=13",
    ],
    extras_require={
        "test": [
            "pytest>=7",
            "pytest-timeout>=2.1",
            "hypothesis>=6",
            "ruff>=0.4",
            "mypy>=1.8",
            # tests/test_tensorboard.py reads parl's event files with the real readers.
            "tensorboard>=2.14",
            "tbparse>=0.0.8",
            # tests/test_wheel.py builds the wheel without build isolation (Python 3.12's venv has no setuptools).
            "setuptools>=64",
            "wheel>=0.40",
        ],
        "plot": ["matplotlib>=3.7"],
        # The Ray runtime (ManagerConfig(runtime="ray")); nothing else imports it.
        "ray": ["ray>=2.9"],
        # Multi-agent envs through PettingZoo's parallel API (parl.envs.pettingzoo).
        "pettingzoo": ["pettingzoo>=1.24"],
        # Weights & Biases logging (parl.training.wandb_logger); runs offline without a server.
        "wandb": ["wandb>=0.16"],
        # Episode videos (`parl eval --video`, TensorBoard videos): gymnasium's RecordVideo writes through moviepy.
        "video": ["moviepy>=1.0"],
        # LunarLander and the other Box2D envs of gymnasium.
        "box2d": ["gymnasium[box2d]>=1.0"],
        # Atari 2600 games through the Arcade Learning Environment (its wheel ships the ROMs); gymnasium's
        # AtariPreprocessing resizes frames with OpenCV.
        "atari": ["ale-py>=0.9", "opencv-python-headless>=4.8"],
        # MinAtar's small Atari-like games (10x10 boolean frames).
        "minatar": ["minatar>=1.0.15"],
        # MuJoCo physics (HalfCheetah, Hopper...) through gymnasium's mujoco envs.
        "mujoco": ["gymnasium[mujoco]>=1.0"],
        # The documentation site (mkdocs with an API reference from docstrings).
        "docs": ["mkdocs>=1.5", "mkdocs-material>=9.5", "mkdocstrings[python]>=0.24"],
        # Peers for the learning benchmark only; the CPU torch 2.13.0 wheel is installed first
        # (`pip install torch==2.13.0`) so that stable-baselines3 does not pull a CUDA build.
        "bench": ["stable-baselines3>=2.3", "matplotlib>=3.7"],
    },
    entry_points={"console_scripts": ["parl=parl.cli:main"]},
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
