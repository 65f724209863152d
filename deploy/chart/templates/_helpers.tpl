{{/* The release's name prefix: "facefusion" for release "facefusion", "<release>-facefusion" otherwise. */}}
{{- define "facefusion.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "facefusion.labels" -}}
app.kubernetes.io/part-of: facefusion
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The standing workers' selector: the span pods' name label (kubectl get pods -l app.kubernetes.io/name=facefusion-worker). */}}
{{- define "facefusion.standingWorkerSelector" -}}
app.kubernetes.io/name: facefusion-worker
app.kubernetes.io/component: standing-worker
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "facefusion.standingWorkerName" -}}
{{- printf "%s-standing-worker" (include "facefusion.fullname" .) -}}
{{- end -}}

{{/* The resources of one worker: the GPU model's row, and the GPUs. */}}
{{- define "facefusion.workerResources" -}}
{{- $row := required (printf "gpu.resourcesByType has no row %q (gpu.type)" .Values.gpu.type) (get .Values.gpu.resourcesByType .Values.gpu.type) -}}
requests:
  cpu: {{ $row.cpu | quote }}
  memory: {{ $row.memory }}
  ephemeral-storage: {{ $row.ephemeralStorage }}
  {{ .Values.gpu.resource }}: {{ .Values.gpu.count | quote }}
limits:
  memory: {{ $row.memory }}
  ephemeral-storage: {{ $row.ephemeralStorage }}
  {{ .Values.gpu.resource }}: {{ .Values.gpu.count | quote }}
{{- end -}}
