{{/* Namespace of the namespaced objects: syncNamespace, else the release namespace. */}}
{{- define "skr-watcher.namespace" -}}
{{- .Values.syncNamespace | default .Release.Namespace -}}
{{- end -}}

{{/* The checked kcpAddr (host:port, as the agent and the installer require). */}}
{{- define "skr-watcher.kcpAddr" -}}
{{- $addr := required "kcpAddr is required (host:port of the KCP gateway)" .Values.kcpAddr -}}
{{- if not (regexMatch "^([^:]+|\\[[0-9a-fA-F:.]+\\]):[0-9]{1,5}$" $addr) -}}
{{- fail (printf "kcpAddr must be host:port, got %q" $addr) -}}
{{- end -}}
{{- $addr -}}
{{- end -}}

{{/* The port of kcpAddr (opens the egress NetworkPolicy). */}}
{{- define "skr-watcher.kcpPort" -}}
{{- include "skr-watcher.kcpAddr" . | splitList ":" | last | atoi -}}
{{- end -}}

{{/* Whether the agent gets a signing key (an existing Secret is expected to hold one). */}}
{{- define "skr-watcher.signed" -}}
{{- if or .Values.credentials.existingSecret .Values.credentials.signingKey -}}true{{- end -}}
{{- end -}}

{{- define "skr-watcher.secretName" -}}
{{- .Values.credentials.existingSecret | default "skr-webhook-tls" -}}
{{- end -}}

{{/* The webhook's caBundle: the KCP gateway's CA bundle, base64. */}}
{{- define "skr-watcher.caBundle" -}}
{{- required "credentials.caCrt is required (the CA bundle, also the webhook's caBundle)" .Values.credentials.caCrt | b64enc -}}
{{- end -}}

{{- define "skr-watcher.restartTrigger" -}}
{{- if .Values.restartTrigger -}}
{{- .Values.restartTrigger -}}
{{- else if not .Values.credentials.existingSecret -}}
{{- $c := .Values.credentials -}}
{{- list $c.tlsCrt $c.tlsKey $c.caCrt $c.signingKey $c.signingKeyId | join "\n" | sha256sum | trunc 16 -}}
{{- end -}}
{{- end -}}
