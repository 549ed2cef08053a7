// The official JavaScript client (@kubernetes/client-node, the version
// package-lock.json pins) against bonsai.
//
// Run by e2e/clients_test.go with node, KUBECONFIG, BONSAI_NS (a namespace
// of its own), BONSAI_POD (a running busybox pod there, labelled
// app=streams, whose container "main" printed log-1 and log-2, prints
// "tick N" twice a second and serves hello-pf as /index.html and 1 MiB of
// "b" as /big over HTTP on 8080) and BONSAI_IMAGE. Every check prints one
// line; a mismatch prints FAIL with what was expected and what came, and
// the script exits 1 after running the other checks.
import * as k8s from '@kubernetes/client-node';
import net from 'node:net';
import { PassThrough, Writable } from 'node:stream';

const NS = process.env.BONSAI_NS;
const POD = process.env.BONSAI_POD;
const IMAGE = process.env.BONSAI_IMAGE;

const kc = new k8s.KubeConfig();
kc.loadFromDefault();
const core = kc.makeApiClient(k8s.CoreV1Api);
const apps = kc.makeApiClient(k8s.AppsV1Api);

class Mismatch extends Error {}

function expect(cond, what, got) {
  if (!cond) {
    throw new Mismatch(got === undefined ? what : `${what}; got ${JSON.stringify(got)}`);
  }
}

const failures = [];

async function check(fn) {
  const start = Date.now();
  try {
    await fn();
    console.log(`ok   ${fn.name.padEnd(22)} ${((Date.now() - start) / 1000).toFixed(2)}s`);
  } catch (e) {
    failures.push(fn.name);
    if (e instanceof Mismatch) {
      console.log(`FAIL ${fn.name.padEnd(22)} ${e.message}`);
    } else if (e instanceof k8s.ApiException) {
      console.log(`FAIL ${fn.name.padEnd(22)} HTTP ${e.code}: ${typeof e.body === 'string' ? e.body : JSON.stringify(e.body)}`);
    } else {
      console.log(`FAIL ${fn.name.padEnd(22)} ${e && e.stack ? e.stack : e}`);
    }
  }
}

// apiError awaits p, which must fail with an ApiException, and returns it
// with its body parsed (the client hands error bodies over as text).
async function apiError(p) {
  try {
    await p;
  } catch (e) {
    if (!(e instanceof k8s.ApiException)) {
      throw e;
    }
    let status = e.body;
    if (typeof status === 'string') {
      try {
        status = JSON.parse(status);
      } catch {
        // left as text: the checks say what they wanted
      }
    }
    return { code: e.code, status };
  }
  throw new Mismatch('the call succeeded; an error was expected');
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function waitFor(what, cond, timeoutMs = 30000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await cond();
    if (v) {
      return v;
    }
    if (Date.now() > deadline) {
      throw new Mismatch(`not ${what} within ${timeoutMs / 1000}s`);
    }
    await sleep(200);
  }
}

async function gone(p) {
  try {
    await p;
    return false;
  } catch (e) {
    if (e instanceof k8s.ApiException && e.code === 404) {
      return true;
    }
    throw e;
  }
}

const configMap = (name, labels, data) => ({ metadata: { name, labels }, data });
const names = (list) => list.items.map((i) => i.metadata.name).sort();

async function crud() {
  const created = await core.createNamespacedConfigMap({ namespace: NS, body: configMap('cm-a', { app: 'clients', tier: 'a' }, { k: 'v1' }) });
  expect(created.metadata.uid && created.metadata.resourceVersion, 'create: uid and resourceVersion set', created.metadata);
  const got = await core.readNamespacedConfigMap({ name: 'cm-a', namespace: NS });
  expect(got.data.k === 'v1' && got.metadata.uid === created.metadata.uid, 'get: the created object', got);
  got.data.k = 'v2';
  const replaced = await core.replaceNamespacedConfigMap({ name: 'cm-a', namespace: NS, body: got });
  expect(replaced.data.k === 'v2', 'replace: data k=v2', replaced.data);
  expect(Number(replaced.metadata.resourceVersion) > Number(created.metadata.resourceVersion), 'replace: a newer resourceVersion',
    [created.metadata.resourceVersion, replaced.metadata.resourceVersion]);
  got.data.k = 'v3';
  const e = await apiError(core.replaceNamespacedConfigMap({ name: 'cm-a', namespace: NS, body: got }));
  expect(e.code === 409 && e.status.reason === 'Conflict', 'stale replace: 409 Conflict', e);
}

async function lists() {
  await core.createNamespacedConfigMap({ namespace: NS, body: configMap('cm-b', { app: 'clients', tier: 'b' }) });
  let l = await core.listNamespacedConfigMap({ namespace: NS, labelSelector: 'app=clients' });
  expect(JSON.stringify(names(l)) === '["cm-a","cm-b"]', 'labelSelector app=clients: cm-a, cm-b', names(l));
  l = await core.listNamespacedConfigMap({ namespace: NS, labelSelector: 'app=clients,tier notin (a)' });
  expect(JSON.stringify(names(l)) === '["cm-b"]', 'labelSelector app=clients,tier notin (a): cm-b', names(l));
  l = await core.listNamespacedConfigMap({ namespace: NS, fieldSelector: 'metadata.name=cm-a' });
  expect(JSON.stringify(names(l)) === '["cm-a"]', 'fieldSelector metadata.name=cm-a', names(l));
  expect(l.metadata.resourceVersion, 'list: a resourceVersion', l.metadata);
  l = await core.listNamespacedPod({ namespace: NS, fieldSelector: 'status.phase=Running' });
  expect(JSON.stringify(names(l)) === JSON.stringify([POD]), 'pods fieldSelector status.phase=Running', names(l));
  l = await core.listNamespacedConfigMap({ namespace: NS, labelSelector: 'app=clients', limit: 1 });
  expect(l.items.length === 1 && l.metadata._continue, 'limit=1: one item and a continue token', l.metadata);
  const rest = await core.listNamespacedConfigMap({ namespace: NS, labelSelector: 'app=clients', limit: 1, _continue: l.metadata._continue });
  expect(JSON.stringify(names(rest)) === '["cm-b"]', 'the continued page: cm-b', names(rest));
}

// watchEvents runs a Watch until stop(events) says so or the server ends
// it, and resolves with the events and how the watch ended.
function watchEvents(path, query, stop, timeoutMs) {
  return new Promise((resolve, reject) => {
    const events = [];
    let controller;
    const timer = setTimeout(() => {
      if (controller) controller.abort();
      resolve({ events, ended: 'client timeout' });
    }, timeoutMs);
    new k8s.Watch(kc).watch(path, query, (type, obj) => {
      events.push({ type, obj });
      if (stop(events)) {
        clearTimeout(timer);
        controller.abort();
        resolve({ events, ended: 'stopped' });
      }
    }, (err) => {
      clearTimeout(timer);
      resolve({ events, ended: err ? `error: ${err}` : 'server' });
    }).then((c) => { controller = c; }, reject);
  });
}

async function watches() {
  const rv = (await core.listNamespacedConfigMap({ namespace: NS })).metadata.resourceVersion;
  const done = watchEvents(`/api/v1/namespaces/${NS}/configmaps`,
    { labelSelector: 'app=clients', resourceVersion: rv, allowWatchBookmarks: true, timeoutSeconds: 20 },
    (evs) => evs.some((e) => e.type === 'DELETED'), 25000);
  // The Watch resolves once the response headers are in; give it a moment.
  await sleep(300);
  await core.createNamespacedConfigMap({ namespace: NS, body: configMap('cm-w', { app: 'clients' }, { k: '1' }) });
  await core.patchNamespacedConfigMap({ name: 'cm-w', namespace: NS, body: { data: { k: '2' } } },
    k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch));
  await core.deleteNamespacedConfigMap({ name: 'cm-w', namespace: NS });
  const { events, ended } = await done;
  const seen = events.filter((e) => e.type !== 'BOOKMARK').map((e) => [e.type, e.obj.metadata.name, (e.obj.data || {}).k]);
  expect(JSON.stringify(seen) === JSON.stringify([['ADDED', 'cm-w', '1'], ['MODIFIED', 'cm-w', '2'], ['DELETED', 'cm-w', '2']]),
    `ADDED, MODIFIED, DELETED of cm-w only (watch ended: ${ended})`, seen);
  const rvs = events.filter((e) => e.type !== 'BOOKMARK').map((e) => Number(e.obj.metadata.resourceVersion));
  expect(rvs.every((r, i) => i === 0 || r > rvs[i - 1]) && rvs[0] > Number(rv), 'increasing resourceVersions after the list\'s', [rv, rvs]);
}

// informer: the client's list-then-watch cache (what Lens-like tools and
// operators written in JavaScript build on) sees what exists and what
// changes.
async function informer() {
  const inf = k8s.makeInformer(kc, `/api/v1/namespaces/${NS}/configmaps`,
    () => core.listNamespacedConfigMap({ namespace: NS, labelSelector: 'app=clients' }), 'app=clients');
  const seen = { add: [], update: [], delete: [] };
  const errs = [];
  let deleted;
  const gotDelete = new Promise((r) => { deleted = r; });
  inf.on('add', (o) => seen.add.push(o.metadata.name));
  inf.on('update', (o) => seen.update.push(`${o.metadata.name}:${(o.data || {}).k}`));
  inf.on('delete', (o) => {
    seen.delete.push(o.metadata.name);
    if (o.metadata.name === 'cm-i') deleted();
  });
  // stop() aborts the informer's watch, which it reports as an error too.
  let stopping = false;
  inf.on('error', (e) => stopping || errs.push(String(e)));
  await inf.start();
  try {
    await waitFor('the informer listed cm-a and cm-b', () => seen.add.includes('cm-a') && seen.add.includes('cm-b'), 10000);
    await core.createNamespacedConfigMap({ namespace: NS, body: configMap('cm-i', { app: 'clients' }, { k: '1' }) });
    await waitFor('the informer saw cm-i added', () => seen.add.includes('cm-i'), 10000);
    await core.patchNamespacedConfigMap({ name: 'cm-i', namespace: NS, body: [{ op: 'replace', path: '/data/k', value: '2' }] },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.JsonPatch));
    await waitFor('the informer saw cm-i updated', () => seen.update.includes('cm-i:2'), 10000);
    await core.deleteNamespacedConfigMap({ name: 'cm-i', namespace: NS });
    await Promise.race([gotDelete, sleep(10000)]);
  } finally {
    stopping = true;
    await inf.stop();
  }
  expect(seen.delete.includes('cm-i') && errs.length === 0, 'informer: cm-i deleted, no errors', { seen, errs });
  expect(inf.list(NS).every((o) => o.metadata.name !== 'cm-i'), 'informer cache: cm-i gone', inf.list(NS).map((o) => o.metadata.name));
}

async function bookmarks() {
  // kube-apiserver sends a watch that allows bookmarks one shortly before
  // its timeoutSeconds end it, so that the client can resume from there.
  const rv = (await core.listNamespacedConfigMap({ namespace: NS })).metadata.resourceVersion;
  const start = Date.now();
  const { events, ended } = await watchEvents(`/api/v1/namespaces/${NS}/configmaps`,
    { resourceVersion: rv, allowWatchBookmarks: true, timeoutSeconds: 4 }, () => false, 8000);
  expect(ended === 'server' && Date.now() - start < 8000, 'the server ended the watch at timeoutSeconds=4', ended);
  const marks = events.filter((e) => e.type === 'BOOKMARK');
  expect(marks.length > 0, 'a BOOKMARK before timeoutSeconds=4 ended the watch', events.map((e) => e.type));
  expect(marks[0].obj.kind === 'ConfigMap' && Number(marks[0].obj.metadata.resourceVersion) >= Number(rv),
    'a bookmark: a ConfigMap with a resourceVersion not older than the list\'s', marks[0].obj);
}

async function patches() {
  await apps.createNamespacedDeployment({
    namespace: NS,
    body: {
      metadata: { name: 'patched', labels: { app: 'clients' } },
      spec: {
        replicas: 0,
        selector: { matchLabels: { app: 'patched' } },
        template: { metadata: { labels: { app: 'patched' } }, spec: { containers: [{ name: 'a', image: IMAGE, command: ['sleep', '3600'] }] } },
      },
    },
  });
  const patch = (body, type, extra = {}) => apps.patchNamespacedDeployment({ name: 'patched', namespace: NS, body, ...extra },
    k8s.setHeaderOptions('Content-Type', type));
  let d = await patch({ spec: { template: { spec: { containers: [{ name: 'b', image: IMAGE, command: ['sleep', '3600'] }] } } } },
    k8s.PatchStrategy.StrategicMergePatch);
  let cs = d.spec.template.spec.containers.map((c) => c.name).sort();
  expect(JSON.stringify(cs) === '["a","b"]', 'strategic merge patch: containers a and b merged by name', cs);
  d = await patch([{ op: 'test', path: '/spec/replicas', value: 0 }, { op: 'add', path: '/metadata/labels/json', value: 'patched' }],
    k8s.PatchStrategy.JsonPatch);
  expect(d.metadata.labels.json === 'patched', 'JSON patch: label json=patched', d.metadata.labels);
  const e = await apiError(patch([{ op: 'test', path: '/spec/replicas', value: 5 }], k8s.PatchStrategy.JsonPatch));
  expect(e.code === 422, 'a failed JSON patch test op: 422', e);
  d = await patch({ spec: { template: { spec: { containers: [{ name: 'c', image: IMAGE }] } } } }, k8s.PatchStrategy.MergePatch);
  cs = d.spec.template.spec.containers.map((c) => c.name);
  expect(JSON.stringify(cs) === '["c"]', 'merge patch: containers replaced by [c]', cs);

  const apply = (manager, owned, force) => core.patchNamespacedConfigMap({
    name: 'applied', namespace: NS, fieldManager: manager, force,
    body: { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'applied' }, data: { owned } },
  }, k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.ServerSideApply));
  const applied = await apply('js-apply', 'js');
  const managers = (applied.metadata.managedFields || []).map((m) => [m.manager, m.operation]);
  expect(applied.data.owned === 'js' && managers.some(([m, o]) => m === 'js-apply' && o === 'Apply'),
    'apply: data owned=js, managed by js-apply (Apply)', [applied.data, managers]);
  const c = await apiError(apply('other', 'other'));
  expect(c.code === 409 && c.status.reason === 'Conflict' && c.status.message.includes('js-apply'),
    'a conflicting apply by another manager: 409 Conflict naming js-apply', c);
  const forced = await apply('other', 'other', true);
  expect(forced.data.owned === 'other', 'a forced apply takes the field', forced.data);
}

// generic: KubernetesObjectApi, the client's kind-agnostic API (what
// "apply a YAML file" tools use): it finds each kind's resource through
// discovery, then creates, reads, applies, lists and deletes.
async function generic() {
  // Health and version, as dashboards check a cluster first.
  const health = new k8s.Health(kc);
  expect(await health.readyz({}) && await health.livez({}), 'readyz and livez');
  const v = await kc.makeApiClient(k8s.VersionApi).getCode();
  expect(v.major === '1' && /^v1\.\d+\./.test(v.gitVersion), 'version: major 1, a v1.x gitVersion', v);
  const objs = k8s.KubernetesObjectApi.makeApiClient(kc);
  const spec = { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'generic', namespace: NS, labels: { app: 'generic' } }, data: { a: '1' } };
  const created = await objs.create(spec);
  expect(created.metadata.uid && created.data.a === '1', 'generic create', created);
  const read = await objs.read({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'generic', namespace: NS } });
  expect(read.metadata.uid === created.metadata.uid, 'generic read', read.metadata);
  const applied = await objs.patch({ ...spec, data: { a: '2' } }, undefined, undefined, 'js-generic', true, k8s.PatchStrategy.ServerSideApply);
  expect(applied.data.a === '2' && (applied.metadata.managedFields || []).some((m) => m.manager === 'js-generic' && m.operation === 'Apply'),
    'generic apply: a=2, managed by js-generic', applied);
  const l = await objs.list('apps/v1', 'Deployment', NS, undefined, undefined, undefined, undefined, 'app=clients');
  expect(JSON.stringify(names(l)) === '["patched"]', 'generic list of apps/v1 Deployments with app=clients', names(l));
  const st = await objs.delete({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'generic', namespace: NS } });
  expect(st.status === 'Success' && st.details.name === 'generic' && st.details.kind === 'configmaps' && st.details.uid === created.metadata.uid,
    'generic delete: a Success Status with details name, kind, uid', st);
}

// subresources: the scale subresource, as autoscalers and "kubectl
// scale"-like tools use it, on a Deployment whose pods can land on no node.
async function subresources() {
  await apps.createNamespacedDeployment({
    namespace: NS,
    body: {
      metadata: { name: 'scaled' },
      spec: {
        replicas: 0,
        selector: { matchLabels: { app: 'scaled' } },
        template: { metadata: { labels: { app: 'scaled' } }, spec: { nodeSelector: { 'bonsai.test/nowhere': 'true' }, containers: [{ name: 'c', image: IMAGE }] } },
      },
    },
  });
  let sc = await apps.readNamespacedDeploymentScale({ name: 'scaled', namespace: NS });
  // autoscaling/v1 omits replicas: 0.
  expect(sc.kind === 'Scale' && !sc.spec.replicas && sc.status.selector === 'app=scaled', 'read scale: Scale, no replicas, selector app=scaled', sc);
  sc = await apps.replaceNamespacedDeploymentScale({ name: 'scaled', namespace: NS, body: { metadata: { name: 'scaled', namespace: NS }, spec: { replicas: 2 } } });
  expect(sc.kind === 'Scale' && sc.spec.replicas === 2, 'replace scale: replicas 2', sc);
  const d = await apps.readNamespacedDeployment({ name: 'scaled', namespace: NS });
  expect(d.spec.replicas === 2, 'the Deployment scaled to 2', d.spec);
  const st = await apps.readNamespacedDeploymentStatus({ name: 'scaled', namespace: NS });
  expect(st.metadata.name === 'scaled' && st.status, 'read status: the Deployment', st.metadata);
  await apps.deleteNamespacedDeployment({ name: 'scaled', namespace: NS });
}

async function replicaSetOf(dep) {
  const l = await apps.listNamespacedReplicaSet({ namespace: NS });
  return l.items.find((rs) => (rs.metadata.ownerReferences || []).some((r) => r.kind === 'Deployment' && r.name === dep));
}

async function deletes() {
  const deps = ['orphan', 'background', 'foreground'];
  for (const name of deps) {
    await apps.createNamespacedDeployment({
      namespace: NS,
      body: {
        metadata: { name },
        spec: {
          replicas: 0,
          selector: { matchLabels: { del: name } },
          template: { metadata: { labels: { del: name } }, spec: { containers: [{ name: 'c', image: IMAGE }] } },
        },
      },
    });
  }
  const rs = {};
  for (const name of deps) {
    rs[name] = (await waitFor(`a ReplicaSet owned by Deployment ${name}`, () => replicaSetOf(name))).metadata.name;
  }
  await apps.deleteNamespacedDeployment({ name: 'orphan', namespace: NS, propagationPolicy: 'Orphan' });
  await waitFor('Deployment orphan gone', () => gone(apps.readNamespacedDeployment({ name: 'orphan', namespace: NS })));
  const left = await waitFor('ReplicaSet of orphan without owner references', async () => {
    const r = await apps.readNamespacedReplicaSet({ name: rs.orphan, namespace: NS });
    return (r.metadata.ownerReferences || []).length === 0 ? r : null;
  });
  expect(!left.metadata.deletionTimestamp, 'the orphaned ReplicaSet is not being deleted', left.metadata);

  await apps.deleteNamespacedDeployment({ name: 'background', namespace: NS, body: { propagationPolicy: 'Background' } });
  expect(await gone(apps.readNamespacedDeployment({ name: 'background', namespace: NS })), 'Deployment background gone at once');
  await waitFor('ReplicaSet of background deleted', () => gone(apps.readNamespacedReplicaSet({ name: rs.background, namespace: NS })));

  // The typed call decodes the answer as a Status; with Foreground the
  // Deployment stays until its dependents are gone, so read it back.
  await apps.deleteNamespacedDeployment({ name: 'foreground', namespace: NS, propagationPolicy: 'Foreground' });
  let marked = null;
  try {
    marked = await apps.readNamespacedDeployment({ name: 'foreground', namespace: NS });
  } catch (e) {
    if (!(e instanceof k8s.ApiException && e.code === 404)) throw e;
  }
  // It may already be gone if the collector was quick; if not, it is
  // marked for foreground deletion.
  if (marked) {
    expect(marked.metadata.deletionTimestamp && (marked.metadata.finalizers || []).includes('foregroundDeletion'),
      'foreground: the Deployment has a deletionTimestamp and the foregroundDeletion finalizer', marked.metadata);
  }
  await waitFor('ReplicaSet of foreground deleted', () => gone(apps.readNamespacedReplicaSet({ name: rs.foreground, namespace: NS })));
  await waitFor('Deployment foreground deleted', () => gone(apps.readNamespacedDeployment({ name: 'foreground', namespace: NS })));
  await apps.deleteNamespacedReplicaSet({ name: rs.orphan, namespace: NS });
}

async function errors() {
  let e = await apiError(core.readNamespacedConfigMap({ name: 'missing', namespace: NS }));
  expect(e.code === 404 && e.status.kind === 'Status' && e.status.reason === 'NotFound' && e.status.code === 404 &&
    e.status.details.name === 'missing' && e.status.details.kind === 'configmaps',
  'get missing: 404 Status NotFound with details name=missing kind=configmaps', e);
  e = await apiError(core.createNamespacedConfigMap({ namespace: NS, body: configMap('cm-a') }));
  expect(e.code === 409 && e.status.reason === 'AlreadyExists' && e.status.details.name === 'cm-a', 'create existing: 409 AlreadyExists for cm-a', e);
  e = await apiError(core.createNamespacedConfigMap({ namespace: NS, body: configMap('Not_Valid') }));
  const causes = (e.status.details || {}).causes || [];
  expect(e.code === 422 && e.status.reason === 'Invalid' && e.status.details.kind === 'ConfigMap' && e.status.details.name === 'Not_Valid' &&
    causes.some((c) => c.field === 'metadata.name' && c.reason === 'FieldValueInvalid'),
  'invalid name: 422 Invalid, details kind=ConfigMap name=Not_Valid, a FieldValueInvalid cause on metadata.name', e);
}

// collect is a Writable that keeps what is written to it.
function collect() {
  const chunks = [];
  const w = new Writable({
    write(chunk, _enc, cb) {
      chunks.push(Buffer.from(chunk));
      cb();
    },
  });
  w.text = () => Buffer.concat(chunks).toString();
  return w;
}

async function logs() {
  const text = await core.readNamespacedPodLog({ name: POD, namespace: NS, container: 'main' });
  expect(text.startsWith('log-1\nlog-2\n'), 'log: log-1, log-2 first', text.slice(0, 40));
  const tail = await core.readNamespacedPodLog({ name: POD, namespace: NS, container: 'main', tailLines: 1 });
  expect(tail.split('\n').length === 2 && tail.startsWith('tick '), 'tailLines=1: one tick line', tail);
  const out = collect();
  const start = Date.now();
  const controller = await new k8s.Log(kc).log(NS, POD, 'main', out, { follow: true });
  await waitFor('two tick lines streamed after 1.2s', () => Date.now() - start > 1200 &&
    out.text().split('\n').filter((l) => l.startsWith('tick ')).length >= 2, 10000);
  controller.abort();
  const lines = out.text().split('\n');
  expect(lines[0] === 'log-1' && lines[1] === 'log-2', 'follow: log-1, log-2 first', lines.slice(0, 4));
  const ticks = lines.filter((l) => l.startsWith('tick ')).map((l) => Number(l.split(' ')[1]));
  expect(ticks.every((n, i) => i === 0 || n === ticks[i - 1] + 1), 'follow: tick lines in order', ticks);
  const e = await apiError(core.readNamespacedPodLog({ name: POD, namespace: NS, container: 'nope' }));
  expect(e.code === 400, 'log of a missing container: 400', e);
}

// run execs command and resolves with its stdout, stderr and the Status
// the server sent on the error channel.
function run(command, stdin) {
  return new Promise((resolve, reject) => {
    const out = collect();
    const err = collect();
    const timer = setTimeout(() => reject(new Mismatch(`exec ${command}: no status within 20s; stdout ${JSON.stringify(out.text())}`)), 20000);
    new k8s.Exec(kc).exec(NS, POD, 'main', command, out, err, stdin || null, false, (status) => {
      clearTimeout(timer);
      // The status comes last; let the streams finish.
      setImmediate(() => resolve({ stdout: out.text(), stderr: err.text(), status }));
    }).then((ws) => {
      ws.on('close', () => setTimeout(() => reject(new Mismatch(`exec ${command}: closed without a status; stdout ${JSON.stringify(out.text())}`)), 500));
    }, reject);
  });
}

async function execs() {
  let r = await run(['hostname']);
  expect(r.stdout === `${POD}\n` && r.status.status === 'Success', 'exec hostname: the pod name and Success', r);
  r = await run(['sh', '-c', "head -c 1048576 /dev/zero | tr '\\0' a"]);
  expect(r.stdout.length === 1048576 && /^a+$/.test(r.stdout) && r.status.status === 'Success', 'exec: 1 MiB of stdout',
    [r.stdout.length, r.stdout.slice(0, 10), r.status]);
  r = await run(['sh', '-c', 'echo to-out; echo to-err >&2; exit 3']);
  expect(r.stdout === 'to-out\n' && r.stderr === 'to-err\n', 'exec: stdout and stderr apart', r);
  const exit = ((r.status.details || {}).causes || []).find((c) => c.reason === 'ExitCode');
  expect(r.status.status === 'Failure' && r.status.reason === 'NonZeroExitCode' && exit && exit.message === '3',
    'exec: a NonZeroExitCode Status with ExitCode 3', r.status);
  // stdin, ended: with v5.channel.k8s.io the client sends the close
  // signal and cat sees end of input.
  const input = new PassThrough();
  const p = run(['cat'], input);
  input.end('from-stdin\n');
  r = await p;
  expect(r.stdout === 'from-stdin\n' && r.status.status === 'Success', 'exec -i cat: stdin echoed, then Success', r);
}

async function attachAndTTY() {
  // attach: the container's own output as it comes.
  const out = collect();
  const ws = await new k8s.Attach(kc).attach(NS, POD, 'main', out, null, null, false);
  try {
    await waitFor('two tick lines through attach', () => out.text().split('\n').filter((l) => l.startsWith('tick ')).length >= 2, 5000);
  } finally {
    ws.close();
  }
  // exec with a TTY: the client sends the size of a resizable stdout on
  // the resize channel.
  const tty = collect();
  tty.rows = 24;
  tty.columns = 100;
  const r = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Mismatch(`exec -t: no status within 20s; stdout ${JSON.stringify(tty.text())}`)), 20000);
    new k8s.Exec(kc).exec(NS, POD, 'main', ['sh', '-c', 'sleep 0.5; stty size'], tty, null, null, true, (status) => {
      clearTimeout(timer);
      setImmediate(() => resolve({ stdout: tty.text(), status }));
    }).catch(reject);
  });
  expect(r.stdout === '24 100\r\n' && r.status.status === 'Success', 'exec -t: stty size reports the size the client sent', r);
}

async function portforwards() {
  // The client's usual shape: a local listener whose connections are
  // forwarded, one WebSocket each.
  const pf = new k8s.PortForward(kc);
  const server = net.createServer((sock) => {
    pf.portForward(NS, POD, [8080], sock, null, sock).catch((e) => sock.destroy(e));
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const get = (path, size) => new Promise((resolve, reject) => {
    const c = net.connect(server.address().port, '127.0.0.1');
    const chunks = [];
    let n = 0;
    c.setTimeout(20000, () => { c.destroy(); reject(new Mismatch(`port-forward GET ${path}: no whole answer within 20s: ${n} bytes`)); });
    c.on('data', (d) => {
      chunks.push(d);
      n += d.length;
      // httpd answers HTTP/1.0 with a Content-Length; the forwarded
      // connection is not closed by the client's side, so stop when the
      // body is whole.
      const all = Buffer.concat(chunks);
      const at = all.indexOf('\r\n\r\n');
      if (at >= 0 && all.length - at - 4 >= size) {
        c.destroy();
        resolve(all);
      }
    });
    c.on('error', reject);
    c.on('end', () => resolve(Buffer.concat(chunks)));
    c.write(`GET ${path} HTTP/1.0\r\nHost: pod\r\n\r\n`);
  });
  try {
    let res = (await get('/index.html', 9)).toString();
    expect(/^HTTP\/1\.[01] 200 /.test(res) && res.endsWith('\r\n\r\nhello-pf\n'), 'port-forward GET: 200 and hello-pf', res.slice(0, 200));
    res = await get('/big', 1048576);
    const body = res.subarray(res.indexOf('\r\n\r\n') + 4);
    expect(/^HTTP\/1\.[01] 200 /.test(res.toString('latin1', 0, 20)) && body.length === 1048576 && body.every((b) => b === 98),
      'port-forward: 1 MiB GET', [res.toString('latin1', 0, 60), body.length]);
  } finally {
    server.close();
  }
}

async function proxies() {
  const text = await core.connectGetNamespacedPodProxyWithPath({ name: `${POD}:8080`, namespace: NS, path: 'index.html' });
  expect(text === 'hello-pf\n', 'pods/proxy GET index.html', text);
  await core.createNamespacedService({
    namespace: NS,
    body: { metadata: { name: 'web' }, spec: { selector: { app: 'streams' }, ports: [{ name: 'http', port: 80, targetPort: 8080 }] } },
  });
  const got = await waitFor('services/proxy to answer', async () => {
    try {
      return await core.connectGetNamespacedServiceProxyWithPath({ name: 'web:http', namespace: NS, path: 'index.html' });
    } catch (e) {
      if (e instanceof k8s.ApiException && e.code === 503) return null;
      throw e;
    }
  }, 20000);
  expect(got === 'hello-pf\n', 'services/proxy GET index.html through port http', got);
}

for (const fn of [crud, lists, watches, informer, bookmarks, patches, generic, subresources, deletes, errors, logs, execs, attachAndTTY, portforwards, proxies]) {
  await check(fn);
}
if (failures.length > 0) {
  console.log(`javascript client: ${failures.length} failed: ${failures.join(', ')}`);
  process.exit(1);
}
console.log('javascript client: all checks passed');
process.exit(0);
