"""The official Python client (Debian's python3-kubernetes) against bonsai.

Run by e2e/clients_test.go with KUBECONFIG, BONSAI_NS (a namespace of its
own), BONSAI_POD (a running busybox pod there, labelled app=streams, whose
container "main" printed log-1 and log-2, prints "tick N" twice a second
and serves hello-pf as /index.html and 1 MiB of "b" as /big over HTTP on
8080) and BONSAI_IMAGE. Every check prints one line; a mismatch prints FAIL
with what was expected and what came, and the script exits 1 after running
the other checks.
"""

import datetime
import json
import os
import re
import socket
import sys
import threading
import time
import traceback

from kubernetes import client, config, dynamic, watch
from kubernetes.client.rest import ApiException
from kubernetes.stream import portforward, stream

NS = os.environ["BONSAI_NS"]
POD = os.environ["BONSAI_POD"]
IMAGE = os.environ["BONSAI_IMAGE"]

config.load_kube_config()
api = client.ApiClient()
core = client.CoreV1Api(api)
apps = client.AppsV1Api(api)

failures = []

# Known gaps: checks of bonsai behaviour that is wrong and is being fixed
# elsewhere. Such a check prints GAP while bonsai still fails it, and fails
# once bonsai passes it, so that the gap is taken off this list.
KNOWN_GAPS = set()


def known_gap(name, fn):
    """Runs fn, a check of the known gap name."""
    if name not in KNOWN_GAPS:
        fn()
        return
    try:
        fn()
    except Mismatch as e:
        print("GAP  %-22s %s" % (name, e), flush=True)
        return
    except ApiException as e:
        print("GAP  %-22s HTTP %s %s" % (name, e.status, e.reason), flush=True)
        return
    raise Mismatch("known gap %s passes now: take it off KNOWN_GAPS" % name)


class Mismatch(Exception):
    pass


def expect(cond, what, got=None):
    if not cond:
        raise Mismatch(what if got is None else "%s; got %r" % (what, got))


def check(fn):
    """Runs one check, records its failure and goes on with the next."""
    start = time.time()
    try:
        fn()
        print("ok   %-22s %.2fs" % (fn.__name__, time.time() - start), flush=True)
    except Mismatch as e:
        failures.append(fn.__name__)
        print("FAIL %-22s %s" % (fn.__name__, e), flush=True)
    except ApiException as e:
        failures.append(fn.__name__)
        print("FAIL %-22s HTTP %s %s: %s" % (fn.__name__, e.status, e.reason, e.body), flush=True)
    except Exception:
        failures.append(fn.__name__)
        print("FAIL %-22s %s" % (fn.__name__, traceback.format_exc()), flush=True)


def api_error(fn, *args, **kwargs):
    """Calls fn and returns the ApiException it must raise."""
    try:
        fn(*args, **kwargs)
    except (ApiException, dynamic.exceptions.DynamicApiError) as e:
        return e
    raise Mismatch("%s succeeded; an error was expected" % fn.__name__)


def wait_for(what, cond, timeout=30):
    deadline = time.time() + timeout
    while True:
        last = cond()
        if last:
            return last
        if time.time() > deadline:
            raise Mismatch("not %s within %ds" % (what, timeout))
        time.sleep(0.2)


def configmap(name, labels=None, data=None):
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, labels=labels), data=data)


def crud():
    created = core.create_namespaced_config_map(NS, configmap("cm-a", {"app": "clients", "tier": "a"}, {"k": "v1"}))
    expect(created.metadata.uid and created.metadata.resource_version, "create: uid and resourceVersion set", created.metadata)
    got = core.read_namespaced_config_map("cm-a", NS)
    expect(got.data == {"k": "v1"} and got.metadata.uid == created.metadata.uid, "get: the created object", got)
    got.data["k"] = "v2"
    replaced = core.replace_namespaced_config_map("cm-a", NS, got)
    expect(replaced.data == {"k": "v2"}, "replace: data k=v2", replaced.data)
    expect(int(replaced.metadata.resource_version) > int(created.metadata.resource_version),
           "replace: a newer resourceVersion", (created.metadata.resource_version, replaced.metadata.resource_version))
    # A replace from a stale resourceVersion is a conflict.
    got.data["k"] = "v3"
    e = api_error(core.replace_namespaced_config_map, "cm-a", NS, got)
    body = json.loads(e.body)
    expect(e.status == 409 and body["reason"] == "Conflict", "stale replace: 409 Conflict", (e.status, body))


def lists():
    core.create_namespaced_config_map(NS, configmap("cm-b", {"app": "clients", "tier": "b"}))
    names = lambda l: sorted(i.metadata.name for i in l.items)
    l = core.list_namespaced_config_map(NS, label_selector="app=clients")
    expect(names(l) == ["cm-a", "cm-b"], "labelSelector app=clients: cm-a, cm-b", names(l))
    l = core.list_namespaced_config_map(NS, label_selector="app=clients,tier!=a")
    expect(names(l) == ["cm-b"], "labelSelector app=clients,tier!=a: cm-b", names(l))
    l = core.list_namespaced_config_map(NS, field_selector="metadata.name=cm-a")
    expect(names(l) == ["cm-a"], "fieldSelector metadata.name=cm-a", names(l))
    expect(l.metadata.resource_version, "list: a resourceVersion", l.metadata)
    l = core.list_namespaced_pod(NS, field_selector="status.phase=Running")
    expect(names(l) == [POD], "pods fieldSelector status.phase=Running", names(l))
    # Paging: limit and continue.
    l = core.list_namespaced_config_map(NS, label_selector="app=clients", limit=1)
    expect(len(l.items) == 1 and l.metadata._continue, "limit=1: one item and a continue token", l.metadata)
    rest = core.list_namespaced_config_map(NS, label_selector="app=clients", limit=1, _continue=l.metadata._continue)
    expect(names(rest) == ["cm-b"], "the continued page: cm-b", names(rest))


def watches():
    rv = core.list_namespaced_config_map(NS).metadata.resource_version
    events = []
    started = threading.Event()

    def run():
        w = watch.Watch()
        started.set()
        for ev in w.stream(core.list_namespaced_config_map, NS, label_selector="app=clients",
                           resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=20):
            if ev["type"] == "BOOKMARK":
                continue
            events.append((ev["type"], ev["object"].metadata.name, ev["object"].metadata.resource_version,
                           (ev["object"].data or {}).get("k"), (ev["object"].metadata.labels or {}).get("app")))
            if [e[0] for e in events].count("DELETED") == 2:
                w.stop()

    th = threading.Thread(target=run, daemon=True)
    th.start()
    started.wait()
    core.create_namespaced_config_map(NS, configmap("cm-w", {"app": "clients"}, {"k": "1"}))
    core.patch_namespaced_config_map("cm-w", NS, {"data": {"k": "2"}})
    # Leaving the selector is a DELETED for this watch, coming back an ADDED.
    core.patch_namespaced_config_map("cm-w", NS, {"metadata": {"labels": {"app": "elsewhere"}}, "data": {"k": "3"}})
    core.patch_namespaced_config_map("cm-w", NS, {"metadata": {"labels": {"app": "clients"}}, "data": {"k": "4"}})
    core.delete_namespaced_config_map("cm-w", NS)
    th.join(25)
    expect(not th.is_alive(), "the watch saw DELETED of cm-w within 25s", events)
    # From a resourceVersion: only what happened after it, not cm-a and
    # cm-b, which were there before.
    # The DELETED for leaving the selector carries the object as it was
    # (k=2, app=clients: what the watcher last saw) at the revision of the
    # change, as kube-apiserver sends it.
    got = [(t, n, k, app) for t, n, _, k, app in events]
    want = [("ADDED", "cm-w", "1", "clients"), ("MODIFIED", "cm-w", "2", "clients"), ("DELETED", "cm-w", "2", "clients"),
            ("ADDED", "cm-w", "4", "clients"), ("DELETED", "cm-w", "4", "clients")]
    expect(got == want, "ADDED, MODIFIED, DELETED (left the selector), ADDED (back), DELETED of cm-w only", events)
    rvs = [int(r) for _, _, r, _, _ in events]
    expect(rvs == sorted(rvs) and rvs[0] > int(rv), "increasing resourceVersions after the list's", (rv, rvs))


def bookmarks():
    # kube-apiserver sends a watch that allows bookmarks one shortly before
    # its timeoutSeconds end it, so that the client can resume from there.
    rv = core.list_namespaced_config_map(NS).metadata.resource_version
    w = watch.Watch()
    got = []
    start = time.time()
    for ev in w.stream(core.list_namespaced_config_map, NS, resource_version=rv,
                       allow_watch_bookmarks=True, timeout_seconds=4):
        got.append(ev)
    took = time.time() - start
    expect(took < 8, "the watch ended by timeoutSeconds=4", took)
    marks = [ev for ev in got if ev["type"] == "BOOKMARK"]
    expect(marks, "a BOOKMARK before timeoutSeconds=4 ended the watch", [ev["type"] for ev in got])
    obj = marks[0]["raw_object"]
    expect(obj.get("kind") == "ConfigMap" and int(obj["metadata"]["resourceVersion"]) >= int(rv),
           "a bookmark: a ConfigMap with only a resourceVersion not older than the list's", obj)


def patches():
    dep = client.V1Deployment(
        metadata=client.V1ObjectMeta(name="patched", labels={"app": "clients"}),
        spec=client.V1DeploymentSpec(
            replicas=0,
            selector=client.V1LabelSelector(match_labels={"app": "patched"}),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels={"app": "patched"}),
                spec=client.V1PodSpec(containers=[client.V1Container(name="a", image=IMAGE, command=["sleep", "3600"])]))))
    apps.create_namespaced_deployment(NS, dep)
    # Strategic merge (a dict body): containers merge by name.
    d = apps.patch_namespaced_deployment("patched", NS, {"spec": {"template": {"spec": {"containers": [
        {"name": "b", "image": IMAGE, "command": ["sleep", "3600"]}]}}}})
    names = [c.name for c in d.spec.template.spec.containers]
    expect(sorted(names) == ["a", "b"], "strategic merge patch: containers a and b merged by name", names)
    # JSON patch (a list body).
    d = apps.patch_namespaced_deployment("patched", NS, [
        {"op": "test", "path": "/spec/replicas", "value": 0},
        {"op": "add", "path": "/metadata/labels/json", "value": "patched"}])
    expect(d.metadata.labels.get("json") == "patched", "JSON patch: label json=patched", d.metadata.labels)
    e = api_error(apps.patch_namespaced_deployment, "patched", NS, [{"op": "test", "path": "/spec/replicas", "value": 5}])
    expect(e.status == 422, "a failed JSON patch test op: 422", (e.status, e.body))
    # Merge patch (through the dynamic client, as Ansible's kubernetes.core
    # does): a list is replaced whole.
    dyn = dynamic.DynamicClient(api)
    deployments = dyn.resources.get(api_version="apps/v1", kind="Deployment")
    d = dyn.patch(deployments, name="patched", namespace=NS, content_type="application/merge-patch+json",
                  body={"spec": {"template": {"spec": {"containers": [{"name": "c", "image": IMAGE}]}}}})
    names = [c["name"] for c in d.to_dict()["spec"]["template"]["spec"]["containers"]]
    expect(names == ["c"], "merge patch: containers replaced by [c]", names)
    # Server-side apply with a field manager, the body in YAML. (22.6's
    # dynamic server_side_apply cannot send a dict with this content type:
    # its REST layer only encodes bodies of JSON content types.)
    cms = dyn.resources.get(api_version="v1", kind="ConfigMap")

    def apply(manager, owned, force=None):
        body = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\ndata:\n  owned: %s\n" % owned
        resp = dyn.request("patch", cms.path(name="applied", namespace=NS), body=body,
                           content_type="application/apply-patch+yaml", field_manager=manager, force_conflicts=force,
                           serialize=False)
        return json.loads(resp.data)

    applied = apply("py-apply", "py")
    managers = [(m["manager"], m["operation"]) for m in applied["metadata"].get("managedFields", [])]
    expect(applied["data"] == {"owned": "py"} and ("py-apply", "Apply") in managers,
           "apply: data owned=py, managed by py-apply (Apply)", (applied["data"], managers))
    e = api_error(apply, "other", "other")
    body = json.loads(e.body)
    expect(e.status == 409 and body["reason"] == "Conflict" and "py-apply" in body["message"],
           "a conflicting apply by another manager: 409 Conflict naming py-apply", (e.status, body))
    forced = apply("other", "other", force=True)
    expect(forced["data"] == {"owned": "other"}, "a forced apply takes the field", forced["data"])


def subresources():
    # The scale subresource, as autoscalers and "kubectl scale"-like
    # scripts use it, on a Deployment whose pods can land on no node.
    apps.create_namespaced_deployment(NS, client.V1Deployment(
        metadata=client.V1ObjectMeta(name="scaled"),
        spec=client.V1DeploymentSpec(
            replicas=0,
            selector=client.V1LabelSelector(match_labels={"app": "scaled"}),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels={"app": "scaled"}),
                spec=client.V1PodSpec(node_selector={"bonsai.test/nowhere": "true"},
                                      containers=[client.V1Container(name="c", image=IMAGE)])))))
    sc = apps.read_namespaced_deployment_scale("scaled", NS)
    # autoscaling/v1 omits replicas: 0.
    expect(sc.kind == "Scale" and not sc.spec.replicas and sc.status.selector == "app=scaled",
           "read scale: Scale, no replicas, selector app=scaled", sc)
    sc = apps.patch_namespaced_deployment_scale("scaled", NS, {"spec": {"replicas": 2}})
    expect(sc.kind == "Scale" and sc.spec.replicas == 2, "patch scale: replicas 2", sc)
    d = apps.read_namespaced_deployment("scaled", NS)
    expect(d.spec.replicas == 2, "the Deployment scaled to 2", d.spec.replicas)
    st = apps.read_namespaced_deployment_status("scaled", NS)
    expect(st.metadata.name == "scaled" and st.status is not None, "read status: the Deployment", st.metadata)
    apps.delete_namespaced_deployment("scaled", NS)


def options():
    # dryRun=All: the answer is the object as it would be, nothing is kept.
    dry = core.create_namespaced_config_map(NS, configmap("dry", data={"k": "v"}), dry_run="All")
    expect(dry.metadata.name == "dry" and dry.data == {"k": "v"}, "dryRun create answers the object", dry.metadata)
    e = api_error(core.read_namespaced_config_map, "dry", NS)
    expect(e.status == 404, "dryRun create kept nothing", e.status)
    # fieldValidation=Strict: an unknown field is a 400 naming it.
    dyn = dynamic.DynamicClient(api)
    cms = dyn.resources.get(api_version="v1", kind="ConfigMap")
    e = api_error(dyn.request, "post", cms.path(namespace=NS), serialize=False,
                  body={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "strict"}, "bogus": 1},
                  query_params=[("fieldValidation", "Strict")])
    body = json.loads(e.body)
    expect(e.status == 400 and body.get("reason") == "BadRequest" and 'unknown field "bogus"' in body.get("message", ""),
           "fieldValidation=Strict: 400 BadRequest naming the unknown field", (e.status, body))
    # A list from a resourceVersion not reached yet: 504 Timeout with the
    # ResourceVersionTooLarge cause.
    rv = int(core.list_namespaced_config_map(NS).metadata.resource_version)
    e = api_error(core.list_namespaced_config_map, NS, resource_version=str(rv + 100000), resource_version_match="NotOlderThan")
    body = json.loads(e.body)
    expect(e.status == 504 and body.get("reason") == "Timeout" and any(
        c.get("reason") == "ResourceVersionTooLarge" for c in body.get("details", {}).get("causes", [])),
        "a list from a future resourceVersion: 504 Timeout, cause ResourceVersionTooLarge", (e.status, body))
    # A delete answers a Success Status naming what went.
    cm = core.create_namespaced_config_map(NS, configmap("to-delete"))
    st = core.delete_namespaced_config_map("to-delete", NS)
    expect(st.status == "Success" and st.details.name == "to-delete" and st.details.kind == "configmaps"
           and st.details.uid == cm.metadata.uid, "delete: a Success Status with details name, kind, uid", st)
    # deletecollection with a label selector.
    core.create_namespaced_config_map(NS, configmap("col-1", {"col": "yes"}))
    core.create_namespaced_config_map(NS, configmap("col-2", {"col": "yes"}))
    resp = core.delete_collection_namespaced_config_map(NS, label_selector="col=yes", _preload_content=False)
    deleted = json.loads(resp.data)
    expect(deleted.get("kind") == "ConfigMapList" and sorted(i["metadata"]["name"] for i in deleted["items"]) == ["col-1", "col-2"],
           "deletecollection answers a ConfigMapList of what it deleted", deleted)
    left = core.list_namespaced_config_map(NS, label_selector="col=yes").items
    expect(not left and core.read_namespaced_config_map("cm-a", NS), "deletecollection col=yes: those gone, cm-a kept",
           [i.metadata.name for i in left])


def more_patches():
    # Strategic merge directives and merge-patch nulls, on the Deployment
    # patches() made (containers: [c]).
    apps.patch_namespaced_deployment("patched", NS, {"spec": {"template": {"spec": {"containers": [
        {"name": "d", "image": IMAGE}]}}}})
    d = apps.patch_namespaced_deployment("patched", NS, {"spec": {"template": {"spec": {"containers": [
        {"name": "c", "$patch": "delete"}]}}}})
    names = [c.name for c in d.spec.template.spec.containers]
    expect(names == ["d"], "strategic merge $patch: delete removes container c", names)
    dyn = dynamic.DynamicClient(api)
    deployments = dyn.resources.get(api_version="apps/v1", kind="Deployment")
    d = dyn.patch(deployments, name="patched", namespace=NS, content_type="application/merge-patch+json",
                  body={"metadata": {"labels": {"json": None}}}).to_dict()
    expect("json" not in d["metadata"]["labels"] and d["metadata"]["labels"].get("app") == "clients",
           "merge patch null removes the label json, keeps app", d["metadata"]["labels"])
    # A JSON patch against a stale resourceVersion: 409.
    e = api_error(apps.patch_namespaced_deployment, "patched", NS, [
        {"op": "replace", "path": "/metadata/resourceVersion", "value": "1"},
        {"op": "add", "path": "/metadata/labels/stale", "value": "x"}])
    expect(e.status == 409, "a JSON patch from a stale resourceVersion: 409 Conflict", (e.status, e.body))


def custom_resources():
    ext = client.ApiextensionsV1Api(api)
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets-py.clients.bonsai.test"},
        "spec": {"group": "clients.bonsai.test", "scope": "Namespaced",
                 "names": {"plural": "widgets-py", "singular": "widget-py", "kind": "WidgetPy", "listKind": "WidgetPyList"},
                 "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
                               "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                                   "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                                   "status": {"type": "object", "properties": {"phase": {"type": "string"}}}}}}}]}}
    ext.create_custom_resource_definition(crd)

    def established():
        c = ext.read_custom_resource_definition("widgets-py.clients.bonsai.test")
        return any(x.type == "Established" and x.status == "True" for x in (c.status.conditions or []))
    wait_for("the CRD Established", established, timeout=20)
    co = client.CustomObjectsApi(api)
    g, v, pl = "clients.bonsai.test", "v1", "widgets-py"

    def create():
        return co.create_namespaced_custom_object(g, v, NS, pl, {
            "apiVersion": g + "/v1", "kind": "WidgetPy", "metadata": {"name": "w1", "labels": {"app": "clients"}}, "spec": {"size": 1}})
    # The API may need a moment after Established to serve the new kind.
    deadline = time.time() + 10
    while True:
        try:
            create()
            break
        except ApiException as e:
            if e.status != 404 or time.time() > deadline:
                raise
            time.sleep(0.2)
    rv = co.list_namespaced_custom_object(g, v, NS, pl)["metadata"]["resourceVersion"]
    events = []

    def run():
        w = watch.Watch()
        for ev in w.stream(co.list_namespaced_custom_object, g, v, NS, pl, resource_version=rv, timeout_seconds=15):
            events.append((ev["type"], ev["object"]["metadata"]["name"], ev["object"].get("spec", {}).get("size"),
                           ev["object"].get("status", {}).get("phase")))
            if ev["type"] == "DELETED":
                w.stop()
    th = threading.Thread(target=run, daemon=True)
    th.start()
    time.sleep(0.3)
    o = co.patch_namespaced_custom_object(g, v, NS, pl, "w1", {"spec": {"size": 2}})
    expect(o["spec"]["size"] == 2, "custom object merge patch: size 2", o)
    o = co.patch_namespaced_custom_object_status(g, v, NS, pl, "w1", {"status": {"phase": "Ready"}, "spec": {"size": 9}})
    expect(o["status"]["phase"] == "Ready" and o["spec"]["size"] == 2, "status patch: phase Ready, spec untouched", o)
    e = api_error(co.create_namespaced_custom_object, g, v, NS, pl, {
        "apiVersion": g + "/v1", "kind": "WidgetPy", "metadata": {"name": "w2"}, "spec": {"size": "big"}})
    body = json.loads(e.body)
    expect(e.status == 422 and body.get("reason") == "Invalid" and any(
        c.get("field") == "spec.size" for c in body.get("details", {}).get("causes", [])),
        "a custom object failing its schema: 422 Invalid on spec.size", body)
    l = co.list_namespaced_custom_object(g, v, NS, pl, label_selector="app=clients")
    expect([i["metadata"]["name"] for i in l["items"]] == ["w1"] and l["kind"] == "WidgetPyList", "list custom objects", l)
    co.delete_namespaced_custom_object(g, v, NS, pl, "w1")
    th.join(20)
    expect([e[:2] for e in events] == [("MODIFIED", "w1"), ("MODIFIED", "w1"), ("DELETED", "w1")]
           and events[0][2] == 2 and events[1][3] == "Ready", "watch of custom objects: MODIFIED, MODIFIED (status), DELETED", events)
    ext.delete_custom_resource_definition("widgets-py.clients.bonsai.test")


def evictions():
    # Eviction, as drain scripts do it, of a pod that can land on no node.
    core.create_namespaced_pod(NS, client.V1Pod(metadata=client.V1ObjectMeta(name="evictee"), spec=client.V1PodSpec(
        node_selector={"bonsai.test/nowhere": "true"}, containers=[client.V1Container(name="c", image=IMAGE)])))
    core.create_namespaced_pod_eviction("evictee", NS, client.V1Eviction(metadata=client.V1ObjectMeta(name="evictee", namespace=NS)))
    wait_for("the evicted pod gone", lambda: _gone(core.read_namespaced_pod, "evictee"), timeout=20)
    e = api_error(core.create_namespaced_pod_eviction, "evictee", NS, client.V1Eviction(metadata=client.V1ObjectMeta(name="evictee", namespace=NS)))
    expect(e.status == 404, "evicting a missing pod: 404", (e.status, e.body))
    # A delete with a precondition on a wrong uid: 409 Conflict.
    cm = core.create_namespaced_config_map(NS, configmap("precond"))
    e = api_error(core.delete_namespaced_config_map, "precond", NS,
                  body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="00000000-0000-0000-0000-000000000000")))
    body = json.loads(e.body)
    expect(e.status == 409 and body.get("reason") == "Conflict" and "Precondition failed" in body.get("message", ""),
           "delete with a wrong uid precondition: 409 Conflict, Precondition failed", body)
    core.delete_namespaced_config_map("precond", NS, body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=cm.metadata.uid)))


def _gone(read, name):
    try:
        read(name, NS)
        return False
    except ApiException as e:
        if e.status == 404:
            return True
        raise


def cluster_scoped():
    # A namespace's life seen by a cluster-wide watch: ADDED, MODIFIED
    # (Terminating) and DELETED once the namespace controller emptied it.
    name = NS + "-tmp"
    rv = core.list_namespace().metadata.resource_version
    events = []

    def run():
        w = watch.Watch()
        for ev in w.stream(core.list_namespace, field_selector="metadata.name=" + name, resource_version=rv, timeout_seconds=30):
            events.append((ev["type"], ev["object"].status.phase))
            if ev["type"] == "DELETED":
                w.stop()
    th = threading.Thread(target=run, daemon=True)
    th.start()
    time.sleep(0.3)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels={"clients": "tmp"})))
    core.create_namespaced_config_map(name, configmap("inside"))
    expect([n.metadata.name for n in core.list_namespace(label_selector="clients=tmp").items] == [name],
           "list namespaces by label", None)
    core.delete_namespace(name)
    th.join(30)
    types = [t for t, _ in events]
    expect(types[0] == "ADDED" and types[-1] == "DELETED" and ("MODIFIED", "Terminating") in events,
           "namespace watch: ADDED, MODIFIED Terminating, DELETED", events)
    # generateName, and a Lease with MicroTime fields as Python writes them.
    cm = core.create_namespaced_config_map(NS, client.V1ConfigMap(metadata=client.V1ObjectMeta(generate_name="gen-")))
    expect(cm.metadata.name.startswith("gen-") and len(cm.metadata.name) == 9, "generateName gen-: gen- and 5 characters", cm.metadata.name)
    now = datetime.datetime.now(datetime.timezone.utc)
    lease = client.CoordinationV1Api(api).create_namespaced_lease(NS, client.V1Lease(
        metadata=client.V1ObjectMeta(name="py-lease"), spec=client.V1LeaseSpec(holder_identity="py", renew_time=now, lease_duration_seconds=10)))
    expect(lease.spec.renew_time == now and lease.spec.holder_identity == "py", "a Lease keeps its renewTime to the microsecond",
           (lease.spec.renew_time, now))
    # A core Event about the pod, found by its involvedObject.
    core.create_namespaced_event(NS, client.CoreV1Event(
        metadata=client.V1ObjectMeta(generate_name="py-"), involved_object=client.V1ObjectReference(kind="Pod", name=POD, namespace=NS),
        reason="Checked", message="by the Python client", type="Normal", first_timestamp=now, last_timestamp=now, count=1))
    evs = core.list_namespaced_event(NS, field_selector="involvedObject.name=%s,reason=Checked" % POD).items
    expect(len(evs) == 1 and evs[0].message == "by the Python client", "the Event found by involvedObject.name and reason", evs)


def replicaset_of(dep_name):
    for rs in apps.list_namespaced_replica_set(NS).items:
        for ref in rs.metadata.owner_references or []:
            if ref.kind == "Deployment" and ref.name == dep_name:
                return rs
    return None


def deletes():
    deps = ["orphan", "background", "foreground"]
    for name in deps:
        apps.create_namespaced_deployment(NS, client.V1Deployment(
            metadata=client.V1ObjectMeta(name=name),
            spec=client.V1DeploymentSpec(
                replicas=0,
                selector=client.V1LabelSelector(match_labels={"del": name}),
                template=client.V1PodTemplateSpec(
                    metadata=client.V1ObjectMeta(labels={"del": name}),
                    spec=client.V1PodSpec(containers=[client.V1Container(name="c", image=IMAGE)])))))
    rs = {name: wait_for("a ReplicaSet owned by Deployment " + name, lambda: replicaset_of(name)) for name in deps}

    def gone(read, name):
        try:
            read(name, NS)
            return False
        except ApiException as e:
            if e.status == 404:
                return True
            raise

    # Orphan: the ReplicaSet stays, without its owner reference.
    apps.delete_namespaced_deployment("orphan", NS, body=client.V1DeleteOptions(propagation_policy="Orphan"))
    wait_for("Deployment orphan gone", lambda: gone(apps.read_namespaced_deployment, "orphan"))
    left = wait_for("ReplicaSet of orphan without owner references",
                    lambda: (lambda r: r if not r.metadata.owner_references else None)(
                        apps.read_namespaced_replica_set(rs["orphan"].metadata.name, NS)))
    expect(left.metadata.deletion_timestamp is None, "the orphaned ReplicaSet is not being deleted", left.metadata)
    # Background: the Deployment goes at once, the ReplicaSet after it.
    apps.delete_namespaced_deployment("background", NS, propagation_policy="Background")
    expect(gone(apps.read_namespaced_deployment, "background"), "Deployment background gone at once")
    wait_for("ReplicaSet of background deleted", lambda: gone(apps.read_namespaced_replica_set, rs["background"].metadata.name))
    # Foreground: the Deployment stays, marked, until its ReplicaSet is gone.
    resp = apps.delete_namespaced_deployment("foreground", NS, propagation_policy="Foreground", _preload_content=False)
    obj = json.loads(resp.data)
    expect(obj.get("kind") == "Deployment" and obj["metadata"].get("deletionTimestamp")
           and "foregroundDeletion" in obj["metadata"].get("finalizers", []),
           "foreground delete answers the Deployment with deletionTimestamp and the foregroundDeletion finalizer", obj.get("metadata"))
    wait_for("ReplicaSet of foreground deleted", lambda: gone(apps.read_namespaced_replica_set, rs["foreground"].metadata.name))
    wait_for("Deployment foreground deleted", lambda: gone(apps.read_namespaced_deployment, "foreground"))
    apps.delete_namespaced_replica_set(rs["orphan"].metadata.name, NS)


def errors():
    e = api_error(core.read_namespaced_config_map, "missing", NS)
    body = json.loads(e.body)
    expect(e.status == 404 and e.reason == "Not Found", "get missing: 404 Not Found", (e.status, e.reason))
    expect(body.get("kind") == "Status" and body.get("reason") == "NotFound" and body.get("code") == 404
           and body.get("details", {}).get("name") == "missing" and body["details"].get("kind") == "configmaps",
           "get missing: Status NotFound with details name=missing kind=configmaps", body)
    e = api_error(core.create_namespaced_config_map, NS, configmap("cm-a"))
    body = json.loads(e.body)
    expect(e.status == 409 and body.get("reason") == "AlreadyExists" and body.get("details", {}).get("name") == "cm-a",
           "create existing: 409 AlreadyExists for cm-a", (e.status, body))
    e = api_error(core.create_namespaced_config_map, NS, configmap("Not_Valid"))
    body = json.loads(e.body)
    causes = body.get("details", {}).get("causes", [])
    expect(e.status == 422 and e.reason == "Unprocessable Entity" and body.get("reason") == "Invalid",
           "invalid name: 422 Invalid", (e.status, e.reason, body))
    expect(body["details"].get("kind") == "ConfigMap" and body["details"].get("name") == "Not_Valid"
           and any(c.get("field") == "metadata.name" and c.get("reason") == "FieldValueInvalid" for c in causes),
           "invalid name: details kind=ConfigMap name=Not_Valid, a FieldValueInvalid cause on metadata.name", body.get("details"))
    e = api_error(core.read_namespaced_pod_log, POD, NS, container="nope")
    expect(e.status == 400, "log of a missing container: 400", (e.status, e.body))
    e = api_error(core.read_namespaced_pod_log, POD, NS, container="main", previous=True)
    expect(e.status == 400 and "previous terminated container" in e.body, "previous log of a container never restarted: 400", (e.status, e.body))
    e = api_error(stream, core.connect_get_namespaced_pod_exec, POD, NS, container="nope", command=["true"],
                  stderr=True, stdin=False, stdout=True, tty=False)
    expect("400" in str(e.reason), "exec in a missing container: the handshake answers 400", e.reason)


def auth_errors():
    # A ServiceAccount's token (TokenRequest) authenticates; RBAC grants it
    # nothing, so a list is 403 Forbidden with upstream's message.
    core.create_namespaced_service_account(NS, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="nobody")))
    tr = core.create_namespaced_service_account_token("nobody", NS, client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=600)))
    expect(tr.status.token, "TokenRequest: a token", tr.status)
    cfg = client.Configuration.get_default_copy()
    cfg.cert_file = cfg.key_file = None
    cfg.api_key = {"authorization": "Bearer " + tr.status.token}
    as_sa = client.CoreV1Api(client.ApiClient(cfg))
    e = api_error(as_sa.list_namespaced_secret, NS)
    body = json.loads(e.body)
    want = 'secrets is forbidden: User "system:serviceaccount:%s:nobody" cannot list resource "secrets" in API group "" in the namespace "%s"' % (NS, NS)
    expect(e.status == 403 and body.get("reason") == "Forbidden" and body.get("message") == want
           and body.get("details", {}).get("kind") == "secrets", "a ServiceAccount without RBAC: 403 Forbidden", body)
    cfg.api_key = {"authorization": "Bearer not-a-token"}
    e = api_error(client.CoreV1Api(client.ApiClient(cfg)).list_namespaced_secret, NS)
    body = json.loads(e.body)
    expect(e.status == 401 and body.get("reason") == "Unauthorized" and body.get("code") == 401, "a bad token: 401 Unauthorized", body)


def logs():
    text = core.read_namespaced_pod_log(POD, NS, container="main")
    expect(text.startswith("log-1\nlog-2\n"), "log: log-1, log-2 first", text[:40])
    text = core.read_namespaced_pod_log(POD, NS, container="main", tail_lines=1)
    expect(text.count("\n") == 1 and text.startswith("tick "), "tailLines=1: one tick line", text)
    text = core.read_namespaced_pod_log(POD, NS, container="main", tail_lines=1, timestamps=True)
    expect(re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z tick \d+\n$", text), "timestamps=True: an RFC 3339 time before the line", text)
    text = core.read_namespaced_pod_log(POD, NS, container="main", limit_bytes=3)
    expect(text == "log", "limitBytes=3", text)
    resp = core.read_namespaced_pod_log(POD, NS, container="main", follow=True, _preload_content=False)
    lines, buf, start = [], b"", time.time()
    try:
        for chunk in resp.stream(1024, decode_content=False):
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                lines.append(line.decode())
            ticks = [l for l in lines if l.startswith("tick ")]
            # More lines than the log held when the request was made: the
            # follow streams what the container writes meanwhile.
            if len(ticks) >= 2 and time.time() - start > 1.2:
                break
            if time.time() - start > 10:
                break
    finally:
        resp.release_conn()
    expect(lines[:2] == ["log-1", "log-2"], "follow: log-1, log-2 first", lines[:4])
    ticks = [int(l.split()[1]) for l in lines if l.startswith("tick ")]
    expect(len(ticks) >= 2 and ticks == list(range(ticks[0], ticks[0] + len(ticks))) and time.time() - start > 1.2,
           "follow: tick lines in order, still coming after 1.2s", lines[-5:])
    # watch.Watch().stream on the log call follows it line by line (it
    # sends follow=True), as kopf and many scripts tail a pod's log.
    w, got = watch.Watch(), []
    for line in w.stream(core.read_namespaced_pod_log, POD, NS, container="main", tail_lines=1, _request_timeout=10):
        got.append(line)
        if len(got) >= 3:
            w.stop()
    expect(len(got) == 3 and all(l.startswith("tick ") for l in got), "Watch().stream of the log: three tick lines", got)


def execs():
    out = stream(core.connect_get_namespaced_pod_exec, POD, NS, container="main", command=["hostname"],
                 stderr=True, stdin=False, stdout=True, tty=False)
    expect(out == POD + "\n", "exec hostname", out)
    ws = stream(core.connect_get_namespaced_pod_exec, POD, NS, container="main",
                command=["sh", "-c", "echo to-out; echo to-err >&2; exit 3"],
                stderr=True, stdin=False, stdout=True, tty=False, _preload_content=False)
    ws.run_forever(timeout=20)
    expect(not ws.is_open(), "exec ended within 20s")
    out, err = ws.read_stdout(), ws.read_stderr()
    expect(out == "to-out\n" and err == "to-err\n", "exec: stdout and stderr apart", (out, err))
    expect(ws.returncode == 3, "exec: exit status 3", ws.returncode)
    # stdin: head exits after the one line it reads.
    ws = stream(core.connect_get_namespaced_pod_exec, POD, NS, container="main", command=["head", "-n1"],
                stderr=True, stdin=True, stdout=True, tty=False, _preload_content=False)
    ws.write_stdin("from-stdin\n")
    ws.run_forever(timeout=20)
    out = ws.read_stdout()
    expect(out == "from-stdin\n", "exec -i: stdin echoed", out)
    expect(ws.returncode == 0, "exec -i: exit status 0", ws.returncode)


def attach_and_tty():
    # attach: the container's own output as it comes.
    ws = stream(core.connect_get_namespaced_pod_attach, POD, NS, container="main",
                stderr=True, stdin=False, stdout=True, tty=False, _preload_content=False)
    lines = [ws.readline_stdout(timeout=5) for _ in range(2)]
    ws.close()
    expect(all(l and l.startswith("tick ") for l in lines), "attach: two tick lines from the container", lines)
    # exec with a TTY, sized through the resize channel (4).
    ws = stream(core.connect_get_namespaced_pod_exec, POD, NS, container="main", command=["sh", "-c", "sleep 0.5; stty size"],
                stderr=False, stdin=True, stdout=True, tty=True, _preload_content=False)
    ws.write_channel(4, json.dumps({"Width": 100, "Height": 24}))
    ws.run_forever(timeout=20)
    out = ws.read_stdout()
    expect(out == "24 100\r\n", "exec -t: stty size reports the size sent on the resize channel", out)


def big_streams():
    # 1 MiB out of exec: many WebSocket frames, in order, none lost.
    ws = stream(core.connect_get_namespaced_pod_exec, POD, NS, container="main",
                command=["sh", "-c", "head -c 1048576 /dev/zero | tr '\\0' a"],
                stderr=True, stdin=False, stdout=True, tty=False, _preload_content=False)
    ws.run_forever(timeout=30)
    out = ws.read_stdout()
    expect(len(out) == 1048576 and set(out) == {"a"}, "exec: 1 MiB of stdout", (len(out), set(out)))
    # 256 KiB into exec's stdin.
    ws = stream(core.connect_get_namespaced_pod_exec, POD, NS, container="main", command=["sh", "-c", "head -c 262144 | wc -c"],
                stderr=True, stdin=True, stdout=True, tty=False, _preload_content=False)
    for _ in range(16):
        ws.write_stdin("x" * 16384)
    ws.run_forever(timeout=30)
    out = ws.read_stdout()
    expect(out.strip() == "262144", "exec: 256 KiB through stdin", out)
    # 1 MiB through port-forward.
    pf = portforward(core.connect_get_namespaced_pod_portforward, POD, NS, ports="8080")
    data = http_get(pf.socket(8080), "/big")
    body = data.split(b"\r\n\r\n", 1)[-1]
    expect(b" 200 " in data.split(b"\r\n")[0] and body == b"b" * 1048576, "port-forward: 1 MiB GET on 8080",
           (data[:100], len(body)))
    pf.close()

    # Two ports on one port-forward: the page from the one, an error from
    # the other.
    def two_ports():
        pf = portforward(core.connect_get_namespaced_pod_portforward, POD, NS, ports="8080,9")
        data = http_get(pf.socket(8080), "/index.html")
        expect(data.endswith(b"\r\n\r\nhello-pf\n"), "port-forward ports=8080,9: hello-pf from 8080", data[:200])
        wait_for("an error on port 9's error channel", lambda: pf.error(9), timeout=10)
        expect("refused" in pf.error(9) and pf.error(8080) is None, "port-forward: port 9 refused, 8080 without error",
               (pf.error(9), pf.error(8080)))
        pf.close()
    known_gap("ports-comma", two_ports)


def proxies():
    # pods/proxy and services/proxy to the pod's httpd, as dashboards reach
    # what runs in a cluster.
    text = core.connect_get_namespaced_pod_proxy_with_path(POD + ":8080", NS, "index.html")
    expect(text == "hello-pf\n", "pods/proxy GET index.html", text)
    core.create_namespaced_service(NS, client.V1Service(metadata=client.V1ObjectMeta(name="web"), spec=client.V1ServiceSpec(
        selector={"app": "streams"}, ports=[client.V1ServicePort(name="http", port=80, target_port=8080)])))

    def through_service():
        try:
            return core.connect_get_namespaced_service_proxy_with_path("web:http", NS, "index.html")
        except ApiException as e:
            if e.status == 503:  # no endpoints yet
                return None
            raise
    text = wait_for("services/proxy to answer", through_service, timeout=20)
    expect(text == "hello-pf\n", "services/proxy GET index.html through port http", text)
    e = api_error(core.connect_get_namespaced_pod_proxy_with_path, POD + ":8080", NS, "missing")
    expect(e.status == 404, "pods/proxy of a missing page: the pod's 404", (e.status, e.body))


def http_get(s, path):
    """GETs path over s, a port-forward's socket, and returns the answer."""
    s.settimeout(20)
    s.sendall(b"GET " + path.encode() + b" HTTP/1.0\r\nHost: pod\r\n\r\n")
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    return data


def watch_burst():
    # A burst of writes reaches a watch whole and in order.
    rv = core.list_namespaced_config_map(NS).metadata.resource_version
    got = []

    def run():
        w = watch.Watch()
        for ev in w.stream(core.list_namespaced_config_map, NS, label_selector="burst=yes", resource_version=rv, timeout_seconds=30):
            got.append((ev["type"], ev["object"].metadata.name))
            if len(got) == 100:
                w.stop()
    th = threading.Thread(target=run, daemon=True)
    th.start()
    time.sleep(0.3)
    for i in range(100):
        core.create_namespaced_config_map(NS, configmap("burst-%03d" % i, {"burst": "yes"}))
    th.join(30)
    expect(got == [("ADDED", "burst-%03d" % i) for i in range(100)], "100 ADDED in order", got[:3] + ["..."] + got[-3:])
    core.delete_collection_namespaced_config_map(NS, label_selector="burst=yes")


def portforwards():
    pf = portforward(core.connect_get_namespaced_pod_portforward, POD, NS, ports="8080")
    s = pf.socket(8080)
    s.settimeout(20)
    s.sendall(b"GET /index.html HTTP/1.0\r\nHost: pod\r\n\r\n")
    data = b""
    while True:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    s.close()
    expect(data.startswith(b"HTTP/1.") and b" 200 " in data.split(b"\r\n")[0] and data.endswith(b"hello-pf\n"),
           "port-forward GET: 200 and hello-pf", data[:200])
    expect(pf.error(8080) is None, "port-forward: nothing on the error channel", pf.error(8080))
    pf.close()
    # Nothing listens on port 9: the error channel says why.
    # (The kubelet dials when the stream opens, as kube's does, so the
    # error may close the local socket before anything is sent.)
    pf = portforward(core.connect_get_namespaced_pod_portforward, POD, NS, ports="9")
    wait_for("an error on port 9's error channel", lambda: pf.error(9), timeout=10)
    expect("refused" in pf.error(9), "port-forward to a closed port: connection refused on the error channel", pf.error(9))
    pf.close()


for fn in (crud, lists, watches, bookmarks, patches, more_patches, subresources, options, custom_resources, cluster_scoped, evictions, deletes, errors, auth_errors, logs, execs, attach_and_tty, big_streams, watch_burst, portforwards, proxies):
    check(fn)
if failures:
    print("python client: %d failed: %s" % (len(failures), ", ".join(failures)))
    sys.exit(1)
print("python client: all checks passed")
