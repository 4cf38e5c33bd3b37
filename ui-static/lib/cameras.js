// The box's cameras and their streams' state, as /api/cameras tells it.
import { get } from './api.js';

export const listCameras = () => get('/api/cameras');

export const streamOf = (camera, kind) => camera.streams.find((s) => s.stream === kind);

// The stream for a small picture: the sub stream when there is one.
export const smallStream = (camera) => (streamOf(camera, 'sub') ? 'sub' : 'main');

// What a person needs to know of a stream, in a word and a sentence.
export function streamState(s) {
  if (s.connected) {
    if (s.record_mode === 'continuous') return { key: 'recording', text: 'Recording' };
    if (s.record_mode === 'events') return { key: 'live', text: 'Live, records events' };
    return { key: 'live', text: 'Live' };
  }
  if (s.last_error) return { key: 'offline', text: `Reconnecting: ${s.last_error}` };
  return { key: 'connecting', text: 'Connecting…' };
}
