"""MuJoCo locomotion: HalfCheetah with SAC and Hopper with TD3 (``parl train halfcheetah_sac``)."""
