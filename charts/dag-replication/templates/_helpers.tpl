{{/* Names, labels, the node list and the cluster config. */}}

{{- define "dag.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "dag.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "dag.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Common labels; call with (dict "root" . "component" "replication-node"). */}}
{{- define "dag.labels" -}}
helm.sh/chart: {{ include "dag.chart" .root }}
{{ include "dag.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: dag-replication
{{- end }}

{{- define "dag.selectorLabels" -}}
app.kubernetes.io/name: {{ include "dag.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "dag.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "dag.nodesService" -}}
{{- printf "%s-nodes" (include "dag.fullname" .) }}
{{- end }}

{{- define "dag.guaranteeService" -}}
{{- printf "%s-guarantee-api" (include "dag.fullname" .) }}
{{- end }}

{{- define "dag.transportsService" -}}
{{- printf "%s-transports" (include "dag.fullname" .) }}
{{- end }}

{{- define "dag.transportService" -}}
{{- printf "%s-transport" (include "dag.fullname" .) }}
{{- end }}

{{- define "dag.imapService" -}}
{{- printf "%s-imap" (include "dag.fullname" .) }}
{{- end }}

{{/* IMAP fronts (imapFront.replicas > 0): "true" when on, after checking what they need. */}}
{{- define "dag.imapFront" -}}
{{- $v := .Values.imapFront }}
{{- if gt (int $v.replicas) 0 }}
{{- if not (include "dag.tls" .) }}
{{- fail "imapFront.replicas > 0 needs tls.enabled: an IMAP front without TLS offers no login (LOGINDISABLED)" }}
{{- end }}
{{- if not $v.users.existingSecret }}
{{- fail "imapFront.replicas > 0 needs imapFront.users.existingSecret: a Secret with the users file (python -m imap_front passwd makes each hash)" }}
{{- end }}true
{{- end }}
{{- end }}

{{/* The transports' site: transports.site, or the first site of the nodes. */}}
{{- define "dag.transportSite" -}}
{{- default (index .Values.replicationNode.sites 0).name .Values.transports.site }}
{{- end }}

{{- define "dag.tokenSecret" -}}
{{- default (printf "%s-token" (include "dag.fullname" .)) .Values.auth.existingSecret }}
{{- end }}

{{- define "dag.tokenKey" -}}
{{- if .Values.auth.existingSecret }}{{ .Values.auth.existingSecretKey }}{{ else }}token{{ end }}
{{- end }}

{{- define "dag.embeddedStore" -}}
{{- if not .Values.clusterStore.etcd.endpoints }}true{{ end }}
{{- end }}

{{/* etcd's TLS Secret is mounted (and named in the config) when set with etcd endpoints. */}}
{{- define "dag.etcdTls" -}}
{{- $etcd := .Values.clusterStore.etcd }}
{{- if and $etcd.endpoints $etcd.tls.existingSecret }}
{{- if not (or $etcd.tls.ca $etcd.tls.clientCertificate) }}
{{- fail "clusterStore.etcd.tls.existingSecret is set but neither tls.ca nor tls.clientCertificate: nothing to use it for" }}
{{- end }}true
{{- end }}
{{- end }}

{{/* etcd's password Secret: a user and its Secret go together. */}}
{{- define "dag.etcdAuth" -}}
{{- $etcd := .Values.clusterStore.etcd }}
{{- if and $etcd.endpoints (or $etcd.auth.username $etcd.auth.existingSecret) }}
{{- if not $etcd.auth.username }}
{{- fail "clusterStore.etcd.auth.existingSecret is set but auth.username is not: etcd authentication needs both" }}
{{- end }}
{{- if not $etcd.auth.existingSecret }}
{{- fail "clusterStore.etcd.auth.username is set but auth.existingSecret is not: the password comes from a Secret, never from values" }}
{{- end }}true
{{- end }}
{{- end }}

{{/* The node's pod name (= its name in the cluster config) for a site and an ordinal. */}}
{{- define "dag.nodeName" -}}
{{- printf "%s-%s-%d" (include "dag.fullname" .root) .site (int .ordinal) }}
{{- end }}

{{/* The cluster config as YAML; (dict "root" . "server" true) for the guarantee API's own
     copy, which binds every address instead of naming its Service.  Under auth.roles,
     "component" names whose copy it is: its `credentials` are those that component accepts
     (default: the nodes', cluster.yaml). */}}
{{- define "dag.clusterConfig" -}}
{{- $root := .root }}
{{- $v := $root.Values }}
{{- $fullname := include "dag.fullname" $root }}
{{- $domain := printf "%s.svc.%s" $root.Release.Namespace $v.clusterDomain }}
{{- $scheme := ternary "https" "http" (eq (include "dag.tls" $root) "true") }}
{{- $nodes := list }}
{{- $known := dict }}
{{- range $site := $v.replicationNode.sites }}
{{- range $i := until (int $site.replicas) }}
{{- $name := include "dag.nodeName" (dict "root" $root "site" $site.name "ordinal" $i) }}
{{- $_ := set $known (printf "%s-%d" $site.name $i) $name }}
{{- $url := printf "%s://%s.%s.%s:%d" $scheme $name (include "dag.nodesService" $root) $domain (int $v.replicationNode.port) }}
{{- $nodes = append $nodes (dict "name" $name "site" $site.name "url" $url "data_dir" "/var/lib/dag/data" "memory_budget" $v.replicationNode.memoryBudget) }}
{{- end }}
{{- end }}
{{- $databases := list }}
{{- range $db := $v.config.databases }}
{{- $copies := list }}
{{- range $c := $db.copies }}
{{- if not (hasKey $known $c.node) }}
{{- fail (printf "config.databases %s: copy on %q, which is no node (nodes are <site>-<ordinal>: %s)" $db.name $c.node (keys $known | sortAlpha | join ", ")) }}
{{- end }}
{{- $copies = append $copies (merge (dict "node" (get $known $c.node)) (omit $c "node")) }}
{{- end }}
{{- $databases = append $databases (merge (dict "copies" $copies) (omit $db "copies")) }}
{{- end }}
{{- $store := dict "kind" "embedded" "path" "/var/lib/dag/store/cluster.db" }}
{{- $etcd := $v.clusterStore.etcd }}
{{- if $etcd.endpoints }}
{{- $store = dict "kind" "etcd" "endpoints" $etcd.endpoints "timeout" $etcd.timeout }}
{{- if include "dag.etcdTls" $root }}
{{- range $e := $etcd.endpoints }}
{{- if not (hasPrefix "https://" $e) }}
{{- fail (printf "clusterStore.etcd.tls.existingSecret is set, so every clusterStore.etcd.endpoints must be https://, but %s is not" $e) }}
{{- end }}
{{- end }}
{{- if $etcd.tls.ca }}
{{- $_ := set $store "ca_file" "/etc/dag-etcd/tls/ca.crt" }}
{{- end }}
{{- if $etcd.tls.clientCertificate }}
{{- $_ := set $store "cert_file" "/etc/dag-etcd/tls/tls.crt" }}
{{- $_ := set $store "key_file" "/etc/dag-etcd/tls/tls.key" }}
{{- end }}
{{- end }}
{{- if include "dag.etcdAuth" $root }}
{{- $_ := set $store "username" $etcd.auth.username }}
{{- $_ := set $store "password_file" "/etc/dag-etcd/auth/password" }}
{{- end }}
{{- else if or $etcd.tls.existingSecret $etcd.auth.username $etcd.auth.existingSecret }}
{{- fail "clusterStore.etcd.tls and clusterStore.etcd.auth are for etcd: set clusterStore.etcd.endpoints too" }}
{{- end }}
{{- $grpc := printf "%s.%s:%d" (include "dag.guaranteeService" $root) $domain (int $v.guaranteeApi.grpcPort) }}
{{- if .server }}
{{- $grpc = printf "0.0.0.0:%d" (int $v.guaranteeApi.grpcPort) }}
{{- end }}
{{- $api := merge (dict "listen" $grpc "http_listen" (printf "0.0.0.0:%d" (int $v.guaranteeApi.httpPort)) "history_dir" "/var/lib/dag/history/samples") $v.guaranteeApi.config }}
{{- $config := dict "cluster" $v.config.cluster "cluster_store" $store "defaults" $v.config.defaults "nodes" $nodes "databases" $databases "guarantee_api" $api }}
{{- /* Without transports the config names none (and says nothing of their settings), so an
     install without them renders the config it always did. */}}
{{- if gt (int $v.transports.replicas) 0 }}
{{- range $site := $v.replicationNode.sites }}
{{- if eq $site.name "transport" }}
{{- fail "replicationNode.sites: a site named \"transport\" would share its StatefulSet and pod names with the transports (transports.replicas > 0): rename the site" }}
{{- end }}
{{- end }}
{{- $hubs := list }}
{{- range $i := until (int $v.transports.replicas) }}
{{- $name := printf "%s-transport-%d" $fullname $i }}
{{- $url := printf "%s://%s.%s.%s:%d" $scheme $name (include "dag.transportsService" $root) $domain (int $v.transports.port) }}
{{- $hub := dict "name" $name "site" (include "dag.transportSite" $root) "url" $url "data_dir" "/var/lib/dag/transport" }}
{{- if $v.transports.smtpPort }}{{- $_ := set $hub "smtp_port" (int $v.transports.smtpPort) }}{{- end }}
{{- if $v.transports.lmtpPort }}{{- $_ := set $hub "lmtp_port" (int $v.transports.lmtpPort) }}{{- end }}
{{- $hubs = append $hubs $hub }}
{{- end }}
{{- $_ := set $config "transports" $hubs }}
{{- $_ := set $config "transport" $v.transports.config }}
{{- end }}
{{- if include "dag.roles" $root }}
{{- /* No auth_token_file and no $DG_AUTH_TOKEN: the cluster credential is gone. */}}
{{- $roles := fromYaml (include "dag.credentialRoles" $root) }}
{{- $accepts := (get (fromYaml (include "dag.credentialUse" $root)) (default "replication-node" .component)).accepts }}
{{- $credentials := list }}
{{- range $key := fromYamlArray (include "dag.credentialOrder" $root) }}
{{- if has $key $accepts }}
{{- $name := (index $v.auth.roles.credentials $key).name }}
{{- $credentials = append $credentials (dict "name" $name "roles" (get $roles $key) "file" (printf "/etc/dag-credentials/%s/secret" $key)) }}
{{- end }}
{{- end }}
{{- $_ := set $config "credentials" $credentials }}
{{- end }}
{{- if include "dag.tls" $root }}
{{- /* Under node identity each process serves (and a node presents) pod/<its name>/;
     dag.secretVolumes lays the files out. */}}
{{- $pair := ternary "/etc/dag-tls/pod/{node}" "/etc/dag-tls/server" $v.tls.nodeIdentity }}
{{- $tls := dict "cert_file" (printf "%s/tls.crt" $pair) "key_file" (printf "%s/tls.key" $pair) "ca_file" "/etc/dag-tls/server/ca.crt" }}
{{- if $v.tls.nodeIdentity }}
{{- $_ := set $tls "client_ca_file" "/etc/dag-tls/server/ca.crt" }}
{{- end }}
{{- if eq .component "imap-front" }}
{{- /* The front serves mail clients the pair they verify (imapFront.tls, else the
     chart's), and calls the nodes as a client presenting none. */}}
{{- $pair = ternary "/etc/dag-imap-tls" "/etc/dag-tls/server" (not (empty $v.imapFront.tls.existingSecret)) }}
{{- $tls = dict "cert_file" (printf "%s/tls.crt" $pair) "key_file" (printf "%s/tls.key" $pair) "ca_file" "/etc/dag-tls/server/ca.crt" }}
{{- end }}
{{- $_ := set $config "tls" $tls }}
{{- end }}
{{- if eq .component "imap-front" }}
{{- $f := $v.imapFront }}
{{- $imap := merge (dict "host" "0.0.0.0" "port" (int $f.port) "users_file" (printf "/etc/dag-imap-users/%s" $f.users.existingSecretKey)) $f.config }}
{{- if $f.tlsPort }}{{- $_ := set $imap "tls_port" (int $f.tlsPort) }}{{- end }}
{{- $_ := set $config "imap" $imap }}
{{- end }}
{{- toYaml $config }}
{{- end }}

{{/* The config key a transport reads: its own copy under auth.roles (it accepts fewer
     credentials than a node), else cluster.yaml. */}}
{{- define "dag.transportConfigKey" -}}
{{- if include "dag.roles" . }}transport.yaml{{ else }}cluster.yaml{{ end }}
{{- end }}

{{/* Volumes and mounts every pod of the release has: the config, a writable /tmp, the
     embedded cluster store when there is no etcd, and etcd's TLS and password Secrets when
     set. */}}
{{- define "dag.commonVolumes" -}}
- name: config
  configMap:
    name: {{ include "dag.fullname" . }}-config
- name: tmp
  emptyDir: {}
{{- if include "dag.embeddedStore" . }}
- name: store
  persistentVolumeClaim:
    claimName: {{ include "dag.fullname" . }}-store
{{- end }}
{{- if include "dag.etcdTls" . }}
- name: etcd-tls
  secret:
    secretName: {{ .Values.clusterStore.etcd.tls.existingSecret }}
    defaultMode: 288  # 0440: the owner and the pod's fsGroup
{{- end }}
{{- if include "dag.etcdAuth" . }}
- name: etcd-auth
  secret:
    secretName: {{ .Values.clusterStore.etcd.auth.existingSecret }}
    defaultMode: 288  # 0440
    items:
      - key: {{ .Values.clusterStore.etcd.auth.existingSecretKey }}
        path: password
{{- end }}
{{- end }}

{{- define "dag.commonMounts" -}}
- name: config
  mountPath: /etc/dag
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- if include "dag.embeddedStore" . }}
- name: store
  mountPath: /var/lib/dag/store
{{- end }}
{{- if include "dag.etcdTls" . }}
- name: etcd-tls
  mountPath: /etc/dag-etcd/tls
  readOnly: true
{{- end }}
{{- if include "dag.etcdAuth" . }}
- name: etcd-auth
  mountPath: /etc/dag-etcd/auth
  readOnly: true
{{- end }}
{{- end }}

{{- define "dag.tokenEnv" -}}
- name: DG_AUTH_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "dag.tokenSecret" . }}
      key: {{ include "dag.tokenKey" . }}
{{- end }}

{{/* Least privilege (auth.roles.enabled): "true" when on, after checking the credentials'
     names (distinct, and none "cluster": the cluster token's). */}}
{{- define "dag.roles" -}}
{{- if .Values.auth.roles.enabled }}
{{- $seen := dict }}
{{- range $key, $c := .Values.auth.roles.credentials }}
{{- if eq $c.name "cluster" }}
{{- fail (printf "auth.roles.credentials.%s.name: \"cluster\" is the cluster token's name" $key) }}
{{- end }}
{{- if hasKey $seen $c.name }}
{{- fail (printf "auth.roles.credentials: %s and %s are both named %q" (get $seen $c.name) $key $c.name) }}
{{- end }}
{{- $_ := set $seen $c.name $key }}
{{- end }}true
{{- end }}
{{- end }}

{{/* Each credential's roles (README "Credentials, roles and node identity"). */}}
{{- define "dag.credentialRoles" -}}
nodes: [replication, monitor]
guarantee: [monitor]
movers: [mover, store, monitor]
transports: [store, monitor]
operators: [operator, monitor]
{{- end }}

{{/* The order the configs list the credentials and the pods mount them. */}}
{{- define "dag.credentialOrder" -}}
[nodes, guarantee, movers, transports, operators]
{{- end }}

{{/* The credential each component presents, and those it accepts: the nodes are called by
     everyone; the guarantee API by movers; a transport by the nodes (redelivery) and by
     senders and its own CLI (the transports' credential).  An IMAP front presents the
     transports' credential (store and monitor: it reads and writes mailboxes as a transport
     does) and accepts none (mail clients log in with the users file).  A pod mounts these
     and no other: a service reads every credential its config names. */}}
{{- define "dag.credentialUse" -}}
replication-node: {presents: nodes, accepts: [nodes, guarantee, movers, transports, operators]}
guarantee-api: {presents: guarantee, accepts: [movers]}
mrs-worker: {presents: movers, accepts: []}
transport: {presents: transports, accepts: [nodes, transports]}
imap-front: {presents: transports, accepts: []}
{{- end }}

{{/* The credentials a component's pods mount (what it presents and what it accepts), in
     the config's order, as a YAML list; call with (dict "root" . "component" ...). */}}
{{- define "dag.credentialsMounted" -}}
{{- $use := get (fromYaml (include "dag.credentialUse" .root)) .component }}
{{- $mounted := list }}
{{- range $key := fromYamlArray (include "dag.credentialOrder" .root) }}
{{- if or (eq $key $use.presents) (has $key $use.accepts) }}
{{- $mounted = append $mounted $key }}
{{- end }}
{{- end }}
{{- toYaml $mounted }}
{{- end }}

{{- define "dag.credentialSecret" -}}
{{- $c := index .root.Values.auth.roles.credentials .key }}
{{- default (printf "%s-credential-%s" (include "dag.fullname" .root) .key) $c.existingSecret }}
{{- end }}

{{/* What a component's container presents: its own credential's file under
     auth.roles, else the cluster token. */}}
{{- define "dag.credentialEnv" -}}
{{- if include "dag.roles" .root }}
- name: DG_CREDENTIAL_FILE
  value: /etc/dag-credentials/{{ (get (fromYaml (include "dag.credentialUse" .root)) .component).presents }}/secret
{{- else }}
{{- include "dag.tokenEnv" .root }}
{{- end }}
{{- end }}

{{/* TLS (tls.enabled): "true" when on, after checking the values go together. */}}
{{- define "dag.tls" -}}
{{- $tls := .Values.tls }}
{{- if $tls.enabled }}
{{- if not $tls.existingSecret }}
{{- fail "tls.enabled needs tls.existingSecret: a Secret with tls.crt, tls.key and ca.crt (the chart issues no certificate)" }}
{{- end }}true
{{- else if $tls.nodeIdentity }}
{{- fail "tls.nodeIdentity needs tls.enabled: node identity is mutual TLS" }}
{{- end }}
{{- end }}

{{- define "dag.nodeTlsSecret" -}}
{{- printf "%s-%s" (default (printf "%s-tls" (include "dag.fullname" .root)) .root.Values.tls.nodeSecretPrefix) .pod }}
{{- end }}

{{/* The Secrets a component's pods mount besides the common ones: its credentials
     (auth.roles) and its TLS files (tls.enabled), each read-only and whole (no subPath:
     Kubernetes updates a mounted Secret in place, and the services reload it).  Call with
     (dict "root" . "component" ... ["site" <a site of replicationNode.sites>]). */}}
{{- define "dag.secretVolumes" -}}
{{- $root := .root }}
{{- if include "dag.roles" $root }}
{{- range $key := fromYamlArray (include "dag.credentialsMounted" .) }}
{{- $c := index $root.Values.auth.roles.credentials $key }}
- name: credential-{{ $key }}
  secret:
    secretName: {{ include "dag.credentialSecret" (dict "root" $root "key" $key) }}
    defaultMode: 288  # 0440: the owner and the pod's fsGroup
    items:
      - key: {{ if $c.existingSecret }}{{ $c.existingSecretKey }}{{ else }}secret{{ end }}
        path: secret
{{- end }}
{{- end }}
{{- if include "dag.tls" $root }}
{{- $server := $root.Values.tls.existingSecret }}
{{- $identity := $root.Values.tls.nodeIdentity }}
{{- /* ca.crt, and the pair a process serves with: server/ (the config's cert_file, and
     the guarantee API's --tls-cert), or, under node identity, pod/<its name>/ ({node} in
     cert_file): a node's own Secret; for a transport the shared pair under its pod's name;
     for an mrs worker, which reads cert_file as written (it has no node name), under a
     directory named "{node}" itself. */}}
- name: tls
  projected:
    defaultMode: 288  # 0440
    sources:
      - secret:
          name: {{ $server }}
          items:
            - {key: ca.crt, path: server/ca.crt}
            {{- if or (not $identity) (eq .component "guarantee-api") (and (eq .component "imap-front") (not $root.Values.imapFront.tls.existingSecret)) }}
            - {key: tls.crt, path: server/tls.crt}
            - {key: tls.key, path: server/tls.key}
            {{- end }}
            {{- if and $identity (eq .component "transport") }}
            {{- range $i := until (int $root.Values.transports.replicas) }}
            {{- $pod := printf "%s-transport-%d" (include "dag.fullname" $root) $i }}
            - {key: tls.crt, path: pod/{{ $pod }}/tls.crt}
            - {key: tls.key, path: pod/{{ $pod }}/tls.key}
            {{- end }}
            {{- end }}
            {{- if and $identity (eq .component "mrs-worker") }}
            - {key: tls.crt, path: "pod/{node}/tls.crt"}
            - {key: tls.key, path: "pod/{node}/tls.key"}
            {{- end }}
      {{- if and $identity (eq .component "replication-node") }}
      {{- range $i := until (int .site.replicas) }}
      {{- $pod := include "dag.nodeName" (dict "root" $root "site" $.site.name "ordinal" $i) }}
      - secret:
          name: {{ include "dag.nodeTlsSecret" (dict "root" $root "pod" $pod) }}
          items:
            - {key: tls.crt, path: pod/{{ $pod }}/tls.crt}
            - {key: tls.key, path: pod/{{ $pod }}/tls.key}
      {{- end }}
      {{- end }}
{{- end }}
{{- end }}

{{- define "dag.secretMounts" -}}
{{- $root := .root }}
{{- if include "dag.roles" $root }}
{{- range $key := fromYamlArray (include "dag.credentialsMounted" .) }}
- name: credential-{{ $key }}
  mountPath: /etc/dag-credentials/{{ $key }}
  readOnly: true
{{- end }}
{{- end }}
{{- if include "dag.tls" $root }}
- name: tls
  mountPath: /etc/dag-tls
  readOnly: true
{{- end }}
{{- end }}

{{/* The scheme of the HTTP probes: HTTPS under tls.enabled (the kubelet does not verify). */}}
{{- define "dag.probeScheme" -}}
{{- if include "dag.tls" . }}, scheme: HTTPS{{ end }}
{{- end }}
