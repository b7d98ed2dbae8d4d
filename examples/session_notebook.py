# %% [markdown]
# # omldm from Python, against a running `omldm serve`
#
# A notebook-style script (cells marked `# %%`: VS Code, PyCharm and Jupytext run them one
# by one; `python examples/session_notebook.py` runs them all). Start the job first:
#
#     omldm serve --embedded-broker        # prints "bootstrap servers 127.0.0.1:PORT"
#     export OMLDM_BOOTSTRAP_SERVERS=127.0.0.1:PORT
#
# `Session(cfg).connect()` opens a producer and readers on the job's topics; it does not
# start a job (`Session(cfg).start()` would start one on a local MiniCluster).

# %%
import os
import sys

from sklearn.datasets import load_digits

from flink_jobs.session import Session, local_config

servers = os.environ.get("OMLDM_BOOTSTRAP_SERVERS")
if not servers:
    sys.exit("set OMLDM_BOOTSTRAP_SERVERS to the running job's Kafka (omldm serve prints it)")
cfg = local_config(servers, topic_prefix=os.environ.get("OMLDM_TOPIC_PREFIX", ""))
session = Session(cfg, "notebook").connect()
PIPELINE = int(os.environ.get("OMLDM_EXAMPLE_PIPELINE", "7"))

# %% [markdown]
# ## 1. Create a pipeline
# Handwritten digits (scikit-learn's bundled 1,797 8×8 images, 10 classes): a running
# standard scaler, then a multi-class Passive-Aggressive classifier, synchronized every 4
# mini-batches of 16 records by the asynchronous protocol; rolling metrics over the last
# 300 records. `omldm list learners` shows every learner's hyperparameters.

# %%
created = session.request({
    "id": PIPELINE, "request": "Create",
    "preProcessors": [{"name": "StandardScaler"}],
    "learner": {"name": "PA", "hyperParameters": {"C": 0.01, "mode": 1}},
    "trainingConfiguration": {"protocol": "Asynchronous", "miniBatchSize": 16,
                              "miniBatches": 4, "metricsWindow": 300}})
print(created["status"], created.get("error", ""))
assert created["status"] == "ok", created

# %% [markdown]
# ## 2. Stream records, test-then-train
# `session.stream` writes every 5th record to `forecasting` without its label (the labels
# come back to us as `held`) and the others to `training`.

# %%
X, y = load_digits(return_X_y=True)
held, n_train, n_forecast = session.stream(X, y, every=5)
answer = session.wait_until_counted(PIPELINE, n_train, n_forecast, timeout=180)
print(f"fitted {answer['fitted']}, predicted {answer['predicted']}")

# %% [markdown]
# ## 3. How good is it?
# The Query answer carries prequential accuracy and, under `metrics`, Cohen's kappa and
# macro F1, cumulative and over the rolling window.

# %%
m = answer["metrics"]
print("cumulative:", {k: round(v, 3) for k, v in m["cumulative"].items() if v is not None})
print("rolling:   ", {k: round(v, 3) for k, v in m["rolling"].items() if v is not None})
predictions = session.predictions_of(PIPELINE)
hits = sum(predictions[i] == label for i, label in held.items() if i in predictions)
print(f"held-out accuracy of the forecasts: {hits / len(held):.3f} ({len(held)} records)")

# %% [markdown]
# ## 4. Change a hyperparameter while it runs, then delete the pipeline
# An Update keeps the learned model; a Delete frees the pipeline on every spoke and hub.

# %%
updated = session.request({"id": PIPELINE, "request": "Update",
                           "learner": {"hyperParameters": {"C": 0.05}}})
print("update:", updated["status"])
now = session.query(PIPELINE)
print("C is now", now["learner"]["hyperParameters"]["C"])
print("delete:", session.request({"id": PIPELINE, "request": "Delete"})["status"])
session.close()
