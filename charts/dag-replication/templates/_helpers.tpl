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
     copy, which binds every address instead of naming its Service. */}}
{{- define "dag.clusterConfig" -}}
{{- $root := .root }}
{{- $v := $root.Values }}
{{- $fullname := include "dag.fullname" $root }}
{{- $domain := printf "%s.svc.%s" $root.Release.Namespace $v.clusterDomain }}
{{- $nodes := list }}
{{- $known := dict }}
{{- range $site := $v.replicationNode.sites }}
{{- range $i := until (int $site.replicas) }}
{{- $name := include "dag.nodeName" (dict "root" $root "site" $site.name "ordinal" $i) }}
{{- $_ := set $known (printf "%s-%d" $site.name $i) $name }}
{{- $url := printf "http://%s.%s.%s:%d" $name (include "dag.nodesService" $root) $domain (int $v.replicationNode.port) }}
{{- $nodes = append $nodes (dict "name" $name "site" $site.name "url" $url "data_dir" "/var/lib/dag/data") }}
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
{{- $url := printf "http://%s.%s.%s:%d" $name (include "dag.transportsService" $root) $domain (int $v.transports.port) }}
{{- $hubs = append $hubs (dict "name" $name "site" (include "dag.transportSite" $root) "url" $url "data_dir" "/var/lib/dag/transport") }}
{{- end }}
{{- $_ := set $config "transports" $hubs }}
{{- $_ := set $config "transport" $v.transports.config }}
{{- end }}
{{- toYaml $config }}
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
