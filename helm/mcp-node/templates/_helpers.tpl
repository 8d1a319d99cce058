{{/*
Names, labels and the values computed from several keys (allowed hosts and
origins, the environment, the grace period). Templates added later
(PrometheusRule, Grafana dashboard) take their labels from here too.
*/}}

{{- define "mcp-node.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The release's full name, also the Service's name: the release name when it
already holds the chart name, else <release>-<chart>.
*/}}
{{- define "mcp-node.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "mcp-node.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "mcp-node.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mcp-node.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "mcp-node.labels" -}}
helm.sh/chart: {{ include "mcp-node.chart" . }}
{{ include "mcp-node.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "mcp-node.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "mcp-node.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "mcp-node.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The Secret and key that hold the Redis URL. */}}
{{- define "mcp-node.redisSecretName" -}}
{{- if .Values.redis.existingSecret }}
{{- .Values.redis.existingSecret }}
{{- else }}
{{- printf "%s-redis" (include "mcp-node.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "mcp-node.redisSecretKey" -}}
{{- if .Values.redis.existingSecret }}
{{- .Values.redis.existingSecretKey }}
{{- else -}}
redis-url
{{- end }}
{{- end }}

{{/* Every Ingress host (rules and TLS), each once, wildcards refused. */}}
{{- define "mcp-node.ingressHosts" -}}
{{- $hosts := list }}
{{- if .Values.ingress.enabled }}
{{- range .Values.ingress.hosts }}
{{- $hosts = append $hosts .host }}
{{- end }}
{{- range .Values.ingress.tls }}
{{- range .hosts }}
{{- $hosts = append $hosts . }}
{{- end }}
{{- end }}
{{- end }}
{{- range $hosts }}
{{- if hasPrefix "*" . }}
{{- fail (printf "ingress host %q: the node cannot allow a wildcard subdomain (MCP_ALLOWED_HOSTS); list each name as an Ingress host, or in config.allowedHosts and config.allowedOrigins" .) }}
{{- end }}
{{- end }}
{{- $hosts | uniq | toJson }}
{{- end }}

{{/*
The host of auth.resource (no port) when authorization is on: the public
name clients use, so a Host the node must allow. Empty otherwise.
*/}}
{{- define "mcp-node.resourceHost" -}}
{{- if and .Values.auth.enabled .Values.auth.resource }}
{{- regexReplaceAll ":[0-9]+$" (urlParse .Values.auth.resource).host "" }}
{{- end }}
{{- end }}

{{/*
MCP_ALLOWED_HOSTS: every name a request may carry in Host on its way to a
pod through the Service or the Ingress, and the host of auth.resource, any
port. A request with another Host gets 403 (DNS rebinding protection).
*/}}
{{- define "mcp-node.allowedHosts" -}}
{{- $svc := include "mcp-node.fullname" . }}
{{- $ns := .Release.Namespace }}
{{- $hosts := list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns .Values.clusterDomain) }}
{{- range (include "mcp-node.ingressHosts" . | fromJsonArray) }}
{{- $hosts = append $hosts . }}
{{- end }}
{{- with (include "mcp-node.resourceHost" .) }}
{{- $hosts = append $hosts . }}
{{- end }}
{{- if .Values.config.allowLoopback }}
{{- $hosts = concat $hosts (list "localhost" "127.0.0.1" "[::1]") }}
{{- end }}
{{- $out := list }}
{{- range $hosts }}
{{- $out = append $out (printf "%s:*" .) }}
{{- end }}
{{- concat $out .Values.config.allowedHosts | uniq | join "," }}
{{- end }}

{{/*
MCP_ALLOWED_ORIGINS: browsers on an Ingress host (https, and http for a
host without TLS), loopback for port-forwarding, and the extra values.
*/}}
{{- define "mcp-node.allowedOrigins" -}}
{{- $tlsHosts := list }}
{{- range .Values.ingress.tls }}
{{- $tlsHosts = concat $tlsHosts (.hosts | default list) }}
{{- end }}
{{- $out := list }}
{{- range (include "mcp-node.ingressHosts" . | fromJsonArray) }}
{{- $out = append $out (printf "https://%s:*" .) }}
{{- if not (has . $tlsHosts) }}
{{- $out = append $out (printf "http://%s:*" .) }}
{{- end }}
{{- end }}
{{- if .Values.config.allowLoopback }}
{{- range (list "localhost" "127.0.0.1" "[::1]") }}
{{- $out = concat $out (list (printf "http://%s:*" .) (printf "https://%s:*" .)) }}
{{- end }}
{{- end }}
{{- concat $out .Values.config.allowedOrigins | uniq | join "," }}
{{- end }}

{{/* The drain the node runs after SIGTERM, in seconds. */}}
{{- define "mcp-node.drainSecs" -}}
{{- add .Values.config.drainDelaySecs .Values.config.drainGraceSecs }}
{{- end }}

{{/*
terminationGracePeriodSeconds: the preStop sleep, the node's drain delay and
grace, and 10 s to leave the cluster and exit. A smaller explicit value would
let the kubelet kill requests the node still lets finish.
*/}}
{{- define "mcp-node.terminationGracePeriodSeconds" -}}
{{- $needed := add .Values.preStopSleepSeconds (include "mcp-node.drainSecs" . | int) }}
{{- $value := .Values.terminationGracePeriodSeconds }}
{{- if kindIs "invalid" $value }}
{{- add $needed 10 }}
{{- else if le (int $value) (int $needed) }}
{{- fail (printf "terminationGracePeriodSeconds %d must be above preStopSleepSeconds + config.drainDelaySecs + config.drainGraceSecs = %d" (int $value) (int $needed)) }}
{{- else }}
{{- $value }}
{{- end }}
{{- end }}

{{/*
config.<key> -> variable, for the keys passed as they are (null: not set,
the node's default applies).
*/}}
{{- define "mcp-node.configEnvNames" -}}
endpoint: MCP_HTTP__ENDPOINT
drainDelaySecs: MCP_DRAIN_DELAY_SECS
drainGraceSecs: MCP_DRAIN_GRACE_SECS
sessionTtlSecs: MCP_SESSION_TTL_SECS
sessionPassivateSecs: MCP_SESSION_PASSIVATE_SECS
maxSessions: MCP_MAX_SESSIONS
maxInFlight: MCP_MAX_IN_FLIGHT
maxBodyBytes: MCP_MAX_BODY_BYTES
requestTimeoutSecs: MCP_REQUEST_TIMEOUT_SECS
responseMode: MCP_RESPONSE_MODE
workers: MCP_WORKERS
keepAliveSecs: MCP_KEEP_ALIVE_SECS
requestBodyTimeoutSecs: MCP_REQUEST_BODY_TIMEOUT_SECS
sseWriteStallTimeoutSecs: MCP_SSE_WRITE_STALL_TIMEOUT_SECS
maxConnections: MCP_MAX_CONNECTIONS
maxConnectionsPerPeer: MCP_MAX_CONNECTIONS_PER_PEER
quotaInitializePerAddress: MCP_QUOTA_INITIALIZE_PER_ADDRESS
quotaRequestsPerPrincipal: MCP_QUOTA_REQUESTS_PER_PRINCIPAL
quotaRequestsPerAddress: MCP_QUOTA_REQUESTS_PER_ADDRESS
quotaSessionsPerPrincipal: MCP_QUOTA_SESSIONS_PER_PRINCIPAL
quotaStreamsPerPrincipal: MCP_QUOTA_STREAMS_PER_PRINCIPAL
quotaStreamsPerAddress: MCP_QUOTA_STREAMS_PER_ADDRESS
quotaListenStreamsPerAddress: MCP_QUOTA_LISTEN_STREAMS_PER_ADDRESS
quotaTasksPerPrincipal: MCP_QUOTA_TASKS_PER_PRINCIPAL
quotaTasksPerAddress: MCP_QUOTA_TASKS_PER_ADDRESS
quotaInFlightBytesPerClient: MCP_QUOTA_IN_FLIGHT_BYTES_PER_CLIENT
pageSize: MCP_PAGE_SIZE
skillsDir: MCP_SKILLS_DIR
log: MCP_LOG
logJson: MCP_LOG_JSON
{{- end }}

{{/*
auth.* -> MCP_AUTH__* variables (lists comma-separated), when auth.enabled;
the introspection client secret by secretKeyRef. toolScopes is a map, which
no variable can carry: see mcp-node.configToml.
*/}}
{{- define "mcp-node.authEnv" -}}
{{- $env := list }}
{{- $auth := .Values.auth }}
{{- if $auth.enabled }}
{{- $env = append $env (dict "name" "MCP_AUTH__RESOURCE" "value" $auth.resource) }}
{{- $lists := dict "issuers" "MCP_AUTH__ISSUERS" "audiences" "MCP_AUTH__AUDIENCES" "requiredScopes" "MCP_AUTH__REQUIRED_SCOPES" "scopesSupported" "MCP_AUTH__SCOPES_SUPPORTED" "algorithms" "MCP_AUTH__ALGORITHMS" }}
{{- range $key := keys $lists | sortAlpha }}
{{- with (get $auth $key) }}
{{- $env = append $env (dict "name" (get $lists $key) "value" (join "," .)) }}
{{- end }}
{{- end }}
{{- if not (kindIs "invalid" $auth.leewaySecs) }}
{{- $env = append $env (dict "name" "MCP_AUTH__LEEWAY_SECS" "value" (toString (int64 $auth.leewaySecs))) }}
{{- end }}
{{- with $auth.resourceName }}
{{- $env = append $env (dict "name" "MCP_AUTH__RESOURCE_NAME" "value" .) }}
{{- end }}
{{- if or $auth.caCertificates.configMap $auth.caCertificates.secret }}
{{- $env = append $env (dict "name" "MCP_AUTH__CA_FILE" "value" (printf "/etc/mcp/auth-ca/%s" $auth.caCertificates.key)) }}
{{- end }}
{{- $i := $auth.introspection }}
{{- if $i.enabled }}
{{- with $i.endpoint }}
{{- $env = append $env (dict "name" "MCP_AUTH__INTROSPECTION__ENDPOINT" "value" .) }}
{{- end }}
{{- $env = append $env (dict "name" "MCP_AUTH__INTROSPECTION__CLIENT_ID" "value" $i.clientId) }}
{{- $env = append $env (dict "name" "MCP_AUTH__INTROSPECTION__CLIENT_SECRET" "valueFrom" (dict "secretKeyRef" (dict "name" $i.existingSecret "key" $i.existingSecretKey))) }}
{{- if not (kindIs "invalid" $i.callsPerAddress) }}
{{- $env = append $env (dict "name" "MCP_AUTH__INTROSPECTION__CALLS_PER_ADDRESS" "value" (toString (int64 $i.callsPerAddress))) }}
{{- end }}
{{- if not (kindIs "invalid" $i.callsPerSecond) }}
{{- $env = append $env (dict "name" "MCP_AUTH__INTROSPECTION__CALLS_PER_SECOND" "value" (toString (int64 $i.callsPerSecond))) }}
{{- end }}
{{- if not (kindIs "invalid" $i.reservedCallsPerSecond) }}
{{- $env = append $env (dict "name" "MCP_AUTH__INTROSPECTION__RESERVED_CALLS_PER_SECOND" "value" (toString (int64 $i.reservedCallsPerSecond))) }}
{{- end }}
{{- if not (kindIs "invalid" $i.reservedCallsPerAddress) }}
{{- $env = append $env (dict "name" "MCP_AUTH__INTROSPECTION__RESERVED_CALLS_PER_ADDRESS" "value" (toString (int64 $i.reservedCallsPerAddress))) }}
{{- end }}
{{- end }}
{{- end }}
{{- toYaml $env }}
{{- end }}

{{/*
serverCard.* -> MCP_SERVER_CARD__* variables, when serverCard.enabled.
*/}}
{{- define "mcp-node.serverCardEnv" -}}
{{- $env := list }}
{{- $card := .Values.serverCard }}
{{- if $card.enabled }}
{{- $names := dict "name" "MCP_SERVER_CARD__NAME" "description" "MCP_SERVER_CARD__DESCRIPTION" "title" "MCP_SERVER_CARD__TITLE" "version" "MCP_SERVER_CARD__VERSION" "websiteUrl" "MCP_SERVER_CARD__WEBSITE_URL" "publicUrl" "MCP_SERVER_CARD__PUBLIC_URL" }}
{{- range $key := keys $names | sortAlpha }}
{{- with (get $card $key) }}
{{- $env = append $env (dict "name" (get $names $key) "value" (toString .)) }}
{{- end }}
{{- end }}
{{- if $card.publishTools }}
{{- $env = append $env (dict "name" "MCP_SERVER_CARD__PUBLISH_TOOLS" "value" "true") }}
{{- end }}
{{- end }}
{{- toYaml $env }}
{{- end }}

{{/*
The node's TOML file (--config), for the settings no variable can carry:
auth.toolScopes as [auth.tool_scopes]. Empty when there is none; keys and
values as toJson writes them, which TOML reads as basic strings.
*/}}
{{- define "mcp-node.configToml" -}}
{{- $scopes := and .Values.auth.enabled .Values.auth.toolScopes }}
{{- if or $scopes .Values.upstreams -}}
# Rendered by the mcp-node chart from auth.toolScopes and upstreams; the
# other settings come from MCP_* variables, which override this file.
{{- end }}
{{- if gt (len .Values.upstreams) 1 }}
upstream_separator = {{ toJson .Values.upstreamSeparator }}
{{- end }}
{{- if $scopes }}
[auth.tool_scopes]
{{- range $tool, $scopes := .Values.auth.toolScopes }}
{{ toJson $tool }} = {{ toJson $scopes }}
{{- end }}
{{- end }}
{{- /* Each upstream a TOML table; JSON strings, arrays and numbers are
       TOML values, a map an inline table of quoted keys. */}}
{{- range .Values.upstreams }}
{{- if and .token_exchange (not $.Values.auth.enabled) }}
{{- fail (printf "upstreams %s: token_exchange exchanges the caller's access token, which needs auth.enabled" .name) }}
{{- end }}

[[upstreams]]
{{- range $key, $value := . }}
{{- if kindIs "map" $value }}
{{ $key }} = { {{- $first := true }}{{ range $k, $v := $value }}{{ if not $first }}, {{ end }}{{ $first = false }}{{ toJson $k }} = {{ toJson $v }}{{ end }} }
{{- else }}
{{ $key }} = {{ toJson $value }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* Where the ConfigMap of mcp-node.configToml is mounted, and the file. */}}
{{- define "mcp-node.configDir" -}}
/etc/mcp-node
{{- end }}
{{- define "mcp-node.configFile" -}}
mcp-node.toml
{{- end }}

{{/*
The container's arguments: --config when the chart renders a file, then
extraArgs. A --config in extraArgs (or MCP_CONFIG in extraEnv, which the
flag would override) would hide the chart's file: refused.
*/}}
{{- define "mcp-node.args" -}}
{{- $args := list }}
{{- if include "mcp-node.configToml" . }}
{{- range .Values.extraArgs }}
{{- if or (eq . "--config") (hasPrefix "--config=" .) }}
{{- fail "extraArgs --config: the chart passes its own --config file (auth.toolScopes, upstreams); give node settings as MCP_* variables in extraEnv instead" }}
{{- end }}
{{- end }}
{{- range .Values.extraEnv }}
{{- if eq .name "MCP_CONFIG" }}
{{- fail "extraEnv MCP_CONFIG: the chart passes its own --config file (auth.toolScopes, upstreams); give node settings as MCP_* variables in extraEnv instead" }}
{{- end }}
{{- end }}
{{- $args = list "--config" (printf "%s/%s" (include "mcp-node.configDir" .) (include "mcp-node.configFile" .)) }}
{{- end }}
{{- concat $args .Values.extraArgs | toYaml }}
{{- end }}

{{/*
Files from objects the user manages, each mounted read-only in a directory
of its own under /etc/mcp (never with subPath: the kubelet updates a mounted
ConfigMap or Secret in place, but not a subPath): the TLS certificate and
key (tls.*), the CA certificates of the authorization servers
(auth.caCertificates, when auth.enabled) and of Redis
(redis.caCertificates). A YAML list of {name, mountPath, source}, source
being a Volume's configMap or secret; items project the named keys alone.
*/}}
{{- define "mcp-node.fileMounts" -}}
{{- $mounts := list }}
{{- $t := .Values.tls }}
{{- if $t.enabled }}
{{- if eq $t.certKey $t.keyKey }}
{{- fail "tls.certKey and tls.keyKey name the same key: the certificate chain and the private key are two keys of the Secret" }}
{{- end }}
{{- $items := list (dict "key" $t.certKey "path" "tls.crt") (dict "key" $t.keyKey "path" "tls.key") }}
{{- $mounts = append $mounts (dict "name" "tls" "mountPath" (include "mcp-node.tlsDir" .) "source" (dict "secret" (dict "secretName" $t.secretName "items" $items))) }}
{{- end }}
{{- if .Values.auth.enabled }}
{{- with (include "mcp-node.caSource" (dict "ca" .Values.auth.caCertificates "value" "auth.caCertificates") | fromYaml) }}
{{- $mounts = append $mounts (dict "name" "auth-ca" "mountPath" "/etc/mcp/auth-ca" "source" .) }}
{{- end }}
{{- end }}
{{- with (include "mcp-node.caSource" (dict "ca" .Values.redis.caCertificates "value" "redis.caCertificates") | fromYaml) }}
{{- if and (not $.Values.redis.existingSecret) (not (hasPrefix "rediss://" $.Values.redis.url)) }}
{{- fail "redis.caCertificates: the node trusts them for a rediss:// (TLS) redis.url only" }}
{{- end }}
{{- $mounts = append $mounts (dict "name" "redis-ca" "mountPath" "/etc/mcp/redis-ca" "source" .) }}
{{- end }}
{{- toYaml $mounts }}
{{- end }}

{{/* Where tls.secretName is mounted (tls.crt and tls.key). */}}
{{- define "mcp-node.tlsDir" -}}
/etc/mcp/tls
{{- end }}

{{/*
A caCertificates value ({configMap, secret, key}) as a Volume source
projecting that key alone, or nothing when neither is set.
*/}}
{{- define "mcp-node.caSource" -}}
{{- $ca := .ca }}
{{- if and $ca.configMap $ca.secret }}
{{- fail (printf "%s: set configMap or secret, not both" .value) }}
{{- end }}
{{- $items := list (dict "key" $ca.key "path" $ca.key) }}
{{- if $ca.configMap }}
{{- toYaml (dict "configMap" (dict "name" $ca.configMap "items" $items)) }}
{{- else if $ca.secret }}
{{- toYaml (dict "secret" (dict "secretName" $ca.secret "items" $items)) }}
{{- end }}
{{- end }}

{{/* The container's environment, as a YAML list of EnvVar objects. */}}
{{- define "mcp-node.env" -}}
{{- $env := list }}
{{- $env = append $env (dict "name" "MCP_BIND" "value" (printf "%s:%d" .Values.listenAddress (int .Values.containerPorts.http))) }}
{{- $env = append $env (dict "name" "MCP_ADMIN_BIND" "value" (printf "%s:%d" .Values.listenAddress (int .Values.containerPorts.admin))) }}
{{- if .Values.tls.enabled }}
{{- $env = append $env (dict "name" "MCP_TLS__CERT_FILE" "value" (printf "%s/tls.crt" (include "mcp-node.tlsDir" .))) }}
{{- $env = append $env (dict "name" "MCP_TLS__KEY_FILE" "value" (printf "%s/tls.key" (include "mcp-node.tlsDir" .))) }}
{{- $env = append $env (dict "name" "MCP_TLS__RELOAD_INTERVAL_SECS" "value" (toString (int64 .Values.tls.reloadIntervalSecs))) }}
{{- end }}
{{- $env = append $env (dict "name" "MCP_REDIS_URL" "valueFrom" (dict "secretKeyRef" (dict "name" (include "mcp-node.redisSecretName" .) "key" (include "mcp-node.redisSecretKey" .)))) }}
{{- if or .Values.redis.caCertificates.configMap .Values.redis.caCertificates.secret }}
{{- $env = append $env (dict "name" "MCP_REDIS_CA_FILE" "value" (printf "/etc/mcp/redis-ca/%s" .Values.redis.caCertificates.key)) }}
{{- end }}
{{- with .Values.redis.keyPrefix }}
{{- $env = append $env (dict "name" "MCP_REDIS__KEY_PREFIX" "value" (toString .)) }}
{{- end }}
{{- if not (kindIs "invalid" .Values.redis.commandTimeoutMs) }}
{{- $env = append $env (dict "name" "MCP_REDIS__COMMAND_TIMEOUT_MS" "value" (toString (int .Values.redis.commandTimeoutMs))) }}
{{- end }}
{{- if not (kindIs "invalid" .Values.redis.replicaAcks) }}
{{- $env = append $env (dict "name" "MCP_REDIS__REPLICA_ACKS" "value" (toString (int .Values.redis.replicaAcks))) }}
{{- end }}
{{- if not (kindIs "invalid" .Values.redis.replicaAckTimeoutMs) }}
{{- $env = append $env (dict "name" "MCP_REDIS__REPLICA_ACK_TIMEOUT_MS" "value" (toString (int .Values.redis.replicaAckTimeoutMs))) }}
{{- end }}
{{- $env = append $env (dict "name" "MCP_ALLOWED_HOSTS" "value" (include "mcp-node.allowedHosts" .)) }}
{{- $env = append $env (dict "name" "MCP_ALLOWED_ORIGINS" "value" (include "mcp-node.allowedOrigins" .)) }}
{{- with .Values.config.connectionLimitExempt }}
{{- $env = append $env (dict "name" "MCP_CONNECTION_LIMIT_EXEMPT" "value" (join "," .)) }}
{{- end }}
{{- with .Values.config.trustedProxies }}
{{- $env = append $env (dict "name" "MCP_TRUSTED_PROXIES" "value" (join "," .)) }}
{{- end }}
{{- $config := .Values.config }}
{{- $names := include "mcp-node.configEnvNames" . | fromYaml }}
{{- range $key := keys $names | sortAlpha }}
{{- $value := "" }}
{{- if hasKey $config $key }}
{{- $value = get $config $key }}
{{- end }}
{{- if and (not (kindIs "invalid" $value)) (ne (toString $value) "") }}
{{- if kindIs "float64" $value }}
{{- $value = int64 $value }}
{{- end }}
{{- $env = append $env (dict "name" (get $names $key) "value" (toString $value)) }}
{{- end }}
{{- end }}
{{- $env = concat $env (include "mcp-node.authEnv" . | fromYamlArray) }}
{{- $env = concat $env (include "mcp-node.serverCardEnv" . | fromYamlArray) }}
{{- $taken := list }}
{{- range $env }}
{{- $taken = append $taken .name }}
{{- end }}
{{- range .Values.extraEnv }}
{{- if has .name $taken }}
{{- fail (printf "extraEnv %s: the chart sets this variable; use its config, redis or auth key" .name) }}
{{- end }}
{{- $taken = append $taken .name }}
{{- $env = append $env . }}
{{- end }}
{{- toYaml $env }}
{{- end }}
