#!/usr/bin/env bash
# The Kubernetes manifests of deploy/k8s:
#   1. deploy/k8s/check/validate.mjs (the Kubernetes API's schemas from npm kubernetes-models,
#      plus unknown fields) accepts them, and refuses a copy with a misspelt field, a string
#      for an integer and a missing required field;
#   2. they agree with the mesh.toml in their ConfigMap: one StatefulSet pod per [[worker]],
#      whose ordinal picks it (layermesh-worker --index) and whose DNS name its addresses use;
#      the ports; memory limits of memory_limit + 64 MiB; the canary's partition; the probes;
#   3. the containers' start commands, run with stand-in programs: the worker pod
#      layermesh-worker-2 runs `--index 2 --listen-any`; the coordinator writes mesh.toml with
#      the Secret's token (0600) and runs `up --no-spawn --listen-any` on it, and refuses a
#      token that would not survive the substitution;
#   4. TLS by default: every address of mesh.toml is tls+tcp://, [tls] names the files of the
#      Secret layermesh-tls as both pod templates mount it, and a copy with a plain tcp://
#      address is refused; the NetworkPolicies admit only the mesh's own pods to its planes
#      and anyone to the API.
# Skips (77) when node or the checker's packages are missing (deploy/setup.sh installs them).
source "$(dirname "$0")/lib.sh"

here=$(cd "$(dirname "$0")/../.." && pwd)
k8s="$here/deploy/k8s"
check="$k8s/check/validate.mjs"
command -v node >/dev/null || {
	echo "SKIP: node is missing (Debian: apt-get install nodejs)"
	exit 77
}
[ -d "$k8s/check/node_modules/kubernetes-models" ] || {
	echo "SKIP: the checker's packages are missing: deploy/setup.sh test installs them" \
		"(npm ci in deploy/k8s/check)"
	exit 77
}
manifests=("$k8s/mesh-configmap.yaml" "$k8s/coordinator.yaml" "$k8s/workers.yaml"
	"$k8s/networkpolicy.yaml")

# ---------------------------------------------------------------- 1. the schemas
node "$check" "${manifests[@]}" || fail "the manifests do not validate"
sed -e 's/^\( *\)readinessProbe:/\1readinesProbe:/' \
	-e 's/containerPort: 7002/containerPort: "7002"/' -e 's/- name: worker$/- nam: worker/' \
	"$k8s/workers.yaml" >"$LM_TMP/bad.yaml"
if node "$check" "$LM_TMP/bad.yaml" 2>"$LM_TMP/bad.err"; then
	fail "the checker took a broken StatefulSet"
fi
for want in "containers[0].readinesProbe: unknown field" \
	"containers.0.ports.1.containerPort must be integer" \
	"containers.0 must have required property name"; do
	grep -qF "$want" "$LM_TMP/bad.err" ||
		fail "the checker did not say '$want': $(cat "$LM_TMP/bad.err")"
done
echo "schemas: ${#manifests[@]} files valid; a broken copy refused for" \
	"$(wc -l <"$LM_TMP/bad.err") reasons"

# ---------------------------------------------------------------- 2. manifests and mesh.toml
node "$check" --json "${manifests[@]}" >"$LM_TMP/all.json"
obj() { jq -c --arg k "$1" --arg n "$2" '.[] | select(.kind == $k and .metadata.name == $n)' \
	"$LM_TMP/all.json"; }
sts=$(obj StatefulSet layermesh-worker)
dep=$(obj Deployment layermesh-coordinator)
mesh=$(obj Service layermesh-mesh)
api=$(obj Service layermesh)
[ -n "$sts" ] && [ -n "$dep" ] && [ -n "$mesh" ] && [ -n "$api" ] || fail "an object is missing"
toml="$LM_TMP/mesh.toml"
obj ConfigMap layermesh-mesh | jq -r '.data["mesh.toml"]' >"$toml"

q() { jq -r "$2" <<<"$1"; }
replicas=$(q "$sts" .spec.replicas)
svc=$(q "$sts" .spec.serviceName)
[ "$svc" = layermesh-mesh ] || fail "the StatefulSet's serviceName is $svc"
[ "$(q "$mesh" .spec.clusterIP)" = None ] || fail "layermesh-mesh is not headless"
[ "$(q "$mesh" .spec.publishNotReadyAddresses)" = true ] ||
	fail "layermesh-mesh hides pods that are not ready: the coordinator could not find them"
[ "$(q "$sts" .spec.podManagementPolicy)" = Parallel ] || fail "workers start in order"
[ "$(q "$sts" .spec.updateStrategy.type)" = RollingUpdate ] || fail "no rolling update"
[ "$(q "$sts" .spec.updateStrategy.rollingUpdate.partition)" = $((replicas - 1)) ] ||
	fail "the partition is not replicas - 1 (the canary is the last worker)"
wc=$(q "$sts" '.spec.template.spec.containers[0]')
port_of() { q "$1" ".ports[] | select(.name == \"$2\") | .containerPort"; }
# Quantities in Mi or Gi, in bytes.
bytes() {
	case "$1" in
	*Mi) echo $((${1%Mi} << 20)) ;;
	*Gi) echo $((${1%Gi} << 30)) ;;
	*) fail "a memory quantity this test does not read: $1" ;;
	esac
}
limit=$(bytes "$(q "$wc" .resources.limits.memory)")
[ "$(q "$wc" .readinessProbe.httpGet.path)" = /readyz ] || fail "worker readiness: not /readyz"
[ "$(q "$wc" .livenessProbe.httpGet.path)" = /healthz ] || fail "worker liveness: not /healthz"
[ "$(q "$wc" .readinessProbe.httpGet.port)" = health ] || fail "worker probes: not the health port"

for ((i = 0; ; i++)); do
	out=$("$LM_WORKER" --config "$toml" --index "$i" --listen-any --show-config 2>&1) || {
		grep -q "out of range" <<<"$out" || fail "mesh.toml: $out"
		break
	}
	host="layermesh-worker-$i.$svc"
	for k in control data; do
		a=$(sed -n "s/^$k=//p" <<<"$out")
		[ "$a" = "tls+tcp://$host:$(port_of "$wc" $k)" ] ||
			fail "worker $i's $k is $a, not pod $i's name and its $k port"
		[ "$(sed -n "s/^listen_$k=//p" <<<"$out")" = \
			"tls+tcp://0.0.0.0:$(port_of "$wc" $k)" ] ||
			fail "worker $i does not listen on the wildcard: $out"
	done
	[ "$(sed -n 's/^http=//p' <<<"$out")" = "$host:$(port_of "$wc" health)" ] ||
		fail "worker $i's http is not pod $i's health port: $out"
	need=$(($(sed -n 's/^memory_limit=//p' <<<"$out") + (64 << 20)))
	[ "$limit" -ge "$need" ] || fail "worker $i needs $need bytes; its container may use $limit"
	[ "$(q "$wc" .resources.requests.cpu)" -ge "$(sed -n 's/^threads=//p' <<<"$out")" ] ||
		fail "worker $i has more threads than CPUs"
done
[ "$i" -eq "$replicas" ] || fail "mesh.toml has $i workers; the StatefulSet $replicas pods"
for p in control data health; do
	q "$mesh" '.spec.ports[].port' | grep -qx "$(port_of "$wc" $p)" ||
		fail "layermesh-mesh lacks the worker's $p port"
done

cc=$(q "$dep" '.spec.template.spec.containers[0]')
data_in=$(sed -n 's/^data_in = "\(.*\)"/\1/p' "$toml")
pod=$(q "$dep" .spec.template.spec.hostname).$(q "$dep" .spec.template.spec.subdomain)
[ "$data_in" = "tls+tcp://$pod:$(port_of "$cc" ring)" ] ||
	fail "data_in $data_in is not the coordinator pod's name and ring port"
[ "$(q "$dep" .spec.template.spec.subdomain)" = "$svc" ] || fail "the coordinator is not in $svc"
http=$(sed -n '/^\[coordinator\]/,/^\[/s/^http = "\(.*\)"/\1/p' "$toml")
[ "${http##*:}" = "$(port_of "$cc" http)" ] ||
	fail "the API listens at $http, the container port differs"
[ "$(q "$api" '.spec.ports[0].targetPort')" = http ] || fail "the Service does not target the API"
[ "$(q "$dep" .spec.replicas)" = 1 ] && [ "$(q "$dep" .spec.strategy.type)" = Recreate ] ||
	fail "more than one coordinator could run at once"
for p in startupProbe:/healthz readinessProbe:/readyz livenessProbe:/healthz; do
	[ "$(q "$cc" ".${p%%:*}.httpGet.path")" = "${p#*:}" ] || fail "the coordinator's ${p%%:*}"
done
echo "mesh.toml: $replicas workers, one per pod, at the pods' names and the containers' ports;" \
	"memory limits of $limit bytes"

# ---------------------------------------------------------------- 3. the start commands
# run_command CONTAINER_JSON DIR VAR=VALUE...: the container's command, its absolute paths moved
# under DIR (where stand-ins of the programs and the mounted files are), in an environment of
# only PATH and the VARs.
run_command() {
	local c=$1 dir=$2 script
	shift 2
	script=$(q "$c" '.command[2]' | sed -e "s|/usr/local/bin/|$dir/bin/|g" \
		-e "s|/etc/layermesh/|$dir/etc/|g" -e "s|/run/layermesh/|$dir/run/|g")
	env -i PATH="$PATH" "$@" /bin/sh -c "$script"
}
stand_in() { # stand_in DIR NAME: a program that records its arguments in DIR/args
	printf '#!/bin/sh\necho "$@" >"%s/args"\n' "$1" >"$1/bin/$2"
	chmod +x "$1/bin/$2"
}
[ "$(q "$wc" '.command[0:2] | join(" ")')" = "/bin/sh -c" ] || fail "the worker's command"
[ "$(q "$cc" '.command[0:2] | join(" ")')" = "/bin/sh -c" ] || fail "the coordinator's command"
[ "$(q "$wc" '.env[] | select(.name == "POD_NAME") | .valueFrom.fieldRef.fieldPath')" = \
	metadata.name ] || fail "the worker does not get its pod's name"

d="$LM_TMP/wpod"
mkdir -p "$d/bin" "$d/etc"
stand_in "$d" layermesh-worker
run_command "$wc" "$d" POD_NAME=layermesh-worker-2
[ "$(cat "$d/args")" = "--config $d/etc/mesh.toml --index 2 --listen-any" ] ||
	fail "pod layermesh-worker-2 ran: $(cat "$d/args")"

d="$LM_TMP/cpod"
mkdir -p "$d/bin" "$d/etc" "$d/run"
cp "$toml" "$d/etc/mesh.toml"
stand_in "$d" layermesh
[ "$(q "$cc" '.env[] | select(.name == "LM_AUTH_TOKEN") | .valueFrom.secretKeyRef.name')" = \
	layermesh-auth ] || fail "the coordinator does not get the token from layermesh-auth"
run_command "$cc" "$d" "LM_AUTH_TOKEN=0123abcd.ef-~_"
[ "$(cat "$d/args")" = "up --no-spawn --listen-any --timeout 300 $d/run/mesh.toml" ] ||
	fail "the coordinator ran: $(cat "$d/args")"
grep -qx 'auth_token = "0123abcd.ef-~_"' "$d/run/mesh.toml" || fail "the token is not in mesh.toml"
[ "$(stat -c %a "$d/run/mesh.toml")" = 600 ] ||
	fail "mesh.toml with the token is readable by others"
"$LM_WORKER" --config "$d/run/mesh.toml" --index 0 --show-config >/dev/null ||
	fail "the coordinator's mesh.toml does not load"
for bad in "" "a/b" "x&y" "a b"; do
	rm -f "$d/args"
	if run_command "$cc" "$d" "LM_AUTH_TOKEN=$bad" 2>"$d/err"; then
		fail "the token '$bad' was taken"
	fi
	grep -q "must be" "$d/err" || fail "the token '$bad': $(cat "$d/err")"
	[ ! -f "$d/args" ] || fail "the coordinator started with the token '$bad'"
done
echo "commands: pod layermesh-worker-2 runs --index 2; the coordinator writes the token (0600)" \
	"and refuses tokens it cannot write"

# ---------------------------------------------------------------- 4. TLS and the network
# check_tls TOML: every address tls+tcp://, [tls] naming the Secret's files where both pod
# templates mount it. Prints why and returns 1 otherwise.
mount_of() { # mount_of POD_SPEC_JSON VOLUME: the container's mount path of the volume
	q "$1" ".containers[0].volumeMounts[] | select(.name == \"$2\") | .mountPath"
}
secret_vol() { # the volume that holds Secret layermesh-tls
	q "$1" '.volumes[] | select(.secret.secretName == "layermesh-tls") | .name'
}
check_tls() {
	local toml=$1 plain spec vol dir f
	plain=$(grep -nE '"(tcp|ipc)://' "$toml" || true)
	[ -z "$plain" ] || { echo "plain addresses: $plain"; return 1; }
	grep -q '^\[tls\]' "$toml" || { echo "no [tls]"; return 1; }
	for spec in "$(q "$sts" .spec.template.spec)" "$(q "$dep" .spec.template.spec)"; do
		vol=$(secret_vol "$spec")
		[ -n "$vol" ] || { echo "a pod template does not mount Secret layermesh-tls"; return 1; }
		dir=$(mount_of "$spec" "$vol")
		for f in ca_file cert_file key_file; do
			grep -qE "^$f = \"$dir/[^/\"]+\"" "$toml" ||
				{ echo "[tls] $f is not in $dir, where the Secret is mounted"; return 1; }
		done
		[ "$(q "$spec" .securityContext.fsGroup)" = "$(q "$spec" .securityContext.runAsGroup)" ] ||
			{ echo "the pod's group cannot read the Secret's files"; return 1; }
	done
}
why=$(check_tls "$toml") || fail "the manifests' TLS: $why"
sed 's|"tls+tcp://layermesh-worker-1|"tcp://layermesh-worker-1|' "$toml" >"$LM_TMP/plain.toml"
if why=$(check_tls "$LM_TMP/plain.toml"); then
	fail "a mesh.toml with a plain tcp:// address passed the check"
fi
echo "tls: every address tls+tcp://, [tls] in Secret layermesh-tls's mount; a plain copy refused" \
	"($why)"
pol=$(obj NetworkPolicy layermesh-mesh)
apipol=$(obj NetworkPolicy layermesh-api)
[ -n "$pol" ] && [ -n "$apipol" ] || fail "a NetworkPolicy is missing"
[ "$(q "$pol" '.spec.podSelector.matchLabels["app.kubernetes.io/name"]')" = layermesh ] ||
	fail "layermesh-mesh does not select the mesh's pods"
[ "$(q "$pol" '.spec.policyTypes | join(",")')" = Ingress ] || fail "layermesh-mesh: policyTypes"
[ "$(q "$pol" '[.spec.ingress[].from[]] | map(keys == ["podSelector"] and
	.podSelector.matchLabels == {"app.kubernetes.io/name": "layermesh"}) | all')" = true ] ||
	fail "layermesh-mesh admits more than the mesh's pods"
for p in "$(port_of "$cc" ring)" "$(port_of "$wc" control)" "$(port_of "$wc" data)" \
	"$(port_of "$wc" health)"; do
	q "$pol" '.spec.ingress[].ports[].port' | grep -qx "$p" || fail "layermesh-mesh lacks port $p"
done
[ "$(q "$apipol" '.spec.ingress[].ports[].port')" = "$(port_of "$cc" http)" ] &&
	[ "$(q "$apipol" '.spec.podSelector.matchLabels["app.kubernetes.io/component"]')" = \
		coordinator ] || fail "layermesh-api is not the coordinator's API port alone"
echo "network: the planes admit the mesh's pods only; the API anyone (with the token)"
echo "ok: k8s"
