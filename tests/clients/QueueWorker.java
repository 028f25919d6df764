// A share consumer (KIP-932) in share group <group> on <topic>: takes records and accepts each one (implicit
// acknowledgement: accepted at the next poll) after <sleep ms> of work. With <hang after> > 0 it stops polling after
// that many records and holds the records it has acquired, unacknowledged, as a consumer stuck in its work would:
// its member stays (the client heartbeats on its own thread) and the records stay undelivered.
// Run from source (tests/kafka_scenario.queue_worker): java -cp "<kafka libs>/*" QueueWorker.java <bootstrap>
// <group> <topic> <sleep ms> <hang after>. Prints "took N" as it goes; runs until it is stopped.
import java.time.Duration;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class QueueWorker {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], group = args[1], topic = args[2];
        long sleepMs = Long.parseLong(args[3]);
        long hangAfter = Long.parseLong(args[4]);
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("client.id", "queue-worker-" + group);
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        p.put("max.poll.records", "10");
        long took = 0;
        try (KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(p)) {
            consumer.subscribe(List.of(topic));
            while (true) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    took++;
                    if (sleepMs > 0) Thread.sleep(sleepMs);
                }
                if (!records.isEmpty()) {
                    System.out.println("took " + took);
                    System.out.flush();
                }
                if (hangAfter > 0 && took >= hangAfter) {
                    System.out.println("hung");
                    System.out.flush();
                    Thread.sleep(Long.MAX_VALUE);  // stuck in its work: never polls again, never acknowledges
                }
            }
        }
    }
}
